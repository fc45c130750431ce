"""trainer.strategy=fsdp in the training loop without Ray: forked ranks of a real gloo
process group on 127.0.0.1, FSDP2 over the gpt workload (shard units: its blocks).

A sharded run resumed at its own world size ends bitwise equal to its uninterrupted run;
one resumed at another world size reshards; a corrupt checkpoint is skipped with its
reason; a checkpoint of the other strategy is refused by name."""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.runtime.checkpoint.shard_index import INDEX_NAME, REST_NAME, parse_index, shard_file
from orchestrator.runtime.loop.train_loop import _Loop
from orchestrator.runtime.loop.worker import UserCodeError
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.spec import RuntimeSpec
from recovery.store import CheckpointStore
from tests.support.runs import loop_spec, run_forked_ranks
from tests.support.stores import TEST_KEY

pytestmark = pytest.mark.integration

RUN = "sh"
STEPS = 12
CRASH_AT = 10
# A run of world 1 resumed from a checkpoint of world 2 (and on): the gradients' sums
# differ in order only, so its weights stay this close to the run at world 2.
TOL_PARAM = 1e-4
JOB = {
    "name": "gpt",
    "workload": "gpt",
    "steps": STEPS,
    "seed": 0,
    "batch_size": 8,
    "params": {
        "context": 16,
        "n_layer": 2,
        "n_head": 2,
        "d_model": 32,
        "corpus_bytes": 200_000,
        "eval_windows": 8,
        "warmup_steps": 2,
        "max_steps": STEPS,
    },
}


def spec(
    root: Path, generation: int = 1, strategy: str = "fsdp", workers: int = 2, async_upload: bool = False
) -> RuntimeSpec:
    return loop_spec(
        root,
        RUN,
        generation,
        JOB,
        trainer={
            "workers": workers,
            "min_workers": 1,
            "strategy": strategy,
            "grad_accum_steps": 2,
            "grad_clip_norm": 1.0,
            "activation_checkpointing": "units",
        },
        checkpoint={"interval_steps": 4, "async_upload": async_upload},
    )


class _Crash(RuntimeError):
    pass


def _rank_main(
    s: RuntimeSpec, rank: int, world: int, crash_at: int | None, root: str, lost_share: int | None = None
) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{root}/pg-{s.generation}", rank=rank, world_size=world)
    try:
        loop = _Loop(s, rank=rank, world=world, control=ControlChannel(s.control_url))
        if crash_at is not None:
            real = loop.data.batch

            def batch(step: int, micro: int = 0) -> Any:
                if step == crash_at:
                    raise _Crash(f"died at step {step}")
                return real(step, micro)

            loop.data.batch = batch  # type: ignore[method-assign]
        if lost_share is not None and loop.share_upload is not None:
            # This rank's file of that step never reaches the store (a rank that died mid-upload).
            submit = loop.share_upload.submit

            def lossy(step: int, files: Any, digests: Any, own: bool = False) -> None:
                if step != lost_share:
                    submit(step, files, digests, own)

            loop.share_upload.submit = lossy  # type: ignore[method-assign]
        with pytest.raises(_Crash) if crash_at is not None else contextlib.nullcontext():
            loop.run()
    finally:
        dist.destroy_process_group()


def train(
    s: RuntimeSpec, world: int, crash_at: int | None = None, lost_share: int | None = None
) -> dict[str, Any] | None:
    root = Path(s.ray_storage_path).parent
    root.mkdir(parents=True, exist_ok=True)
    args = [(s, r, world, crash_at, str(root), lost_share) for r in range(world)]
    assert run_forked_ranks(_rank_main, args, 120) == [0] * world
    final = ControlChannel(s.control_url).read_final(s.generation)
    assert (final is None) == (crash_at is not None)
    return final


def store(root: Path) -> CheckpointStore:
    return CheckpointStore(f"file://{root}/store", region="r", key=TEST_KEY)


def events(s: RuntimeSpec, kind: str) -> list[dict[str, Any]]:
    return [e for e in ControlChannel(s.control_url).read_events(s.generation, set()) if e["type"] == kind]


def final_weights(root: Path) -> dict[str, torch.Tensor]:
    """The whole model of the last checkpoint, put together from every rank's file."""
    st = store(root)
    m = st.manifest(RUN, STEPS)
    assert m is not None
    index = parse_index(st.read(m, INDEX_NAME))
    files = [torch.load(io.BytesIO(st.read(m, shard_file(r))), weights_only=True) for r in range(index.world)]
    return {
        key.removeprefix("model/"): torch.cat([f[key] for f in files])
        for key in sorted(index.tensors)
        if key.startswith("model/")
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Path]:
    """(the uninterrupted run's folder, its final, a run that died at CRASH_AT), both at world 2."""
    whole = tmp_path_factory.mktemp("whole")
    final = train(spec(whole), world=2)
    assert final is not None
    crashed = tmp_path_factory.mktemp("crashed")
    train(spec(crashed), world=2, crash_at=CRASH_AT)
    assert store(crashed).committed_steps(RUN) == [4, 8]
    return whole, final, crashed


def test_a_sharded_run_resumed_at_its_world_size_ends_bitwise_equal(tmp_path: Path, runs: Any) -> None:
    whole, unbroken, crashed = runs
    root = shutil.copytree(crashed, tmp_path / "run")
    s = spec(root, generation=2)
    final = train(s, world=2)
    assert [e["restored_step"] for e in events(s, "train_started")] == [8]
    assert final is not None and final["weights_sha256"] == unbroken["weights_sha256"]
    # The digest of the sharded model is the function of the whole weights every run reports.
    from orchestrator.runtime.loop.weights import weights_sha256

    assert weights_sha256(final_weights(whole)) == unbroken["weights_sha256"]
    m = store(whole).manifest(RUN, STEPS)
    assert m is not None and m.extra["weights_sha256"] == unbroken["weights_sha256"]
    assert m.extra["strategy"] == "fsdp"
    # One file of shards per rank, all in the one signed manifest; no whole model anywhere.
    names = {f.name for f in m.files}
    assert {shard_file(0), shard_file(1), INDEX_NAME, REST_NAME} <= names and "model.pt" not in names
    # Each rank read its own file of shards alone.
    assert sorted((e["rank"], tuple(e["read"])) for e in events(s, "restore_shards")) == [
        (0, (shard_file(0),)),
        (1, (shard_file(1),)),
    ]


def test_a_checkpoint_of_two_ranks_restores_resharded_at_one(tmp_path: Path, runs: Any) -> None:
    whole, _, crashed = runs
    root = shutil.copytree(crashed, tmp_path / "run")
    s = spec(root, generation=2)
    assert train(s, world=1) is not None
    (started,) = events(s, "train_started")
    assert started["restored_step"] == 8
    # Where the restore went: its choice, the reads (their hashing part of them), the
    # shards deserialised and copied into the model.
    phases = started["restore_phases"]
    assert list(phases) == ["choose_s", "read_s", "verify_s", "deserialize_s", "copy_in_s", "handover_s"], phases
    assert 0 < phases["verify_s"] <= phases["read_s"] and phases["deserialize_s"] > 0 and phases["copy_in_s"] > 0
    # The one rank read both files of the checkpoint of two: resharded.
    assert [tuple(e["read"]) for e in events(s, "restore_shards")] == [(shard_file(0), shard_file(1))]
    ours, theirs = final_weights(root), final_weights(whole)
    assert list(ours) == list(theirs)
    assert max(float((ours[k] - theirs[k]).abs().max()) for k in ours) < TOL_PARAM


def test_a_corrupt_checkpoint_is_skipped_with_its_reason(tmp_path: Path, runs: Any, flip_byte: Any) -> None:
    _, unbroken, crashed = runs
    root = shutil.copytree(crashed, tmp_path / "run")
    # One rank's file of shards corrupted: the whole step is skipped, the file named.
    flip_byte(store(root), RUN, 8, shard_file(1))
    s = spec(root, generation=2)
    final = train(s, world=2)
    skipped = events(s, "checkpoint_skipped")
    assert [e["step"] for e in skipped] == [8] and shard_file(1) in skipped[0]["reason"]
    assert [e["restored_step"] for e in events(s, "train_started")] == [4]
    assert final is not None and final["weights_sha256"] == unbroken["weights_sha256"]


def test_every_checkpoint_passed_over_starts_afresh_with_the_uninterrupted_weights(
    tmp_path: Path, runs: Any, flip_byte: Any
) -> None:
    # Every rank reads, and rank 1 fails each step's file: the group passes over both and
    # nothing is loaded, so the run starts as one never restored (an optimizer state made
    # for a load that never came, by torch's step at lr 0, would count that step).
    _, unbroken, crashed = runs
    root = shutil.copytree(crashed, tmp_path / "run")
    for step in (4, 8):
        flip_byte(store(root), RUN, step, shard_file(1))
    s = spec(root, generation=2)
    final = train(s, world=2)
    assert [e["step"] for e in events(s, "checkpoint_skipped")] == [8, 4]
    assert [e["restored_step"] for e in events(s, "train_started")] == [0]
    assert final is not None and final["weights_sha256"] == unbroken["weights_sha256"]


def test_a_checkpoint_of_the_other_strategy_is_refused_by_name(tmp_path: Path, runs: Any) -> None:
    _, _, crashed = runs
    root = shutil.copytree(crashed, tmp_path / "run")
    s = spec(root, generation=2, strategy="ddp")
    with pytest.raises(UserCodeError, match=r"trainer.strategy=fsdp, this run has trainer.strategy=ddp; resume it"):
        _Loop(s, rank=0, world=1, control=ControlChannel(s.control_url)).run(wrap=lambda m: m)


def test_one_sharded_worker_ends_with_the_digest_of_the_same_run_under_ddp(tmp_path: Path) -> None:
    sharded = train(spec(tmp_path / "fsdp", workers=1), world=1)
    s = spec(tmp_path / "ddp", strategy="ddp", workers=1)
    _Loop(s, rank=0, world=1, control=ControlChannel(s.control_url)).run(wrap=lambda m: m)
    whole = ControlChannel(s.control_url).read_final(1)
    assert sharded is not None and whole is not None
    assert sharded["weights_sha256"] == whole["weights_sha256"]
    assert sharded["metrics"] == whole["metrics"]


def test_a_step_whose_rank_file_never_lands_is_not_committed(tmp_path: Path, runs: Any) -> None:
    _, unbroken, _ = runs
    s = spec(tmp_path / "run", async_upload=True)
    final = train(s, world=2, lost_share=8)
    # Rank 0 cannot put rank 1's shards: step 8 is given up, the others commit.
    assert store(tmp_path / "run").committed_steps(RUN) == [4, 12]
    retries = events(s, "upload_retry")
    assert [e["step"] for e in retries] == [8] and "rank 1's shard-r1.pt" in retries[0]["error"]
    assert final is not None and final["weights_sha256"] == unbroken["weights_sha256"]
