"""job.train_func without a Ray cluster: the report hook, step numbering, rank merging,
checkpoint_sha256, restore, preemption and user errors, on real file:// stores.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.runtime.checkpoint.scratch import write_files
from orchestrator.runtime.loop import func_mode
from orchestrator.runtime.loop.func_exact import is_ours, rng_name
from orchestrator.wire.control import ControlChannel
from recovery.store import CheckpointStore
from tests.support.runs import run_forked_ranks
from tests.support.stores import TEST_KEY
from tests.unit.orchestrator.runtime.loop.test_func_mode import events, make_spec

pytestmark = pytest.mark.integration


def _rank_main(rank: int, root: str) -> None:
    """One of two ranks: reports with checkpoints from both, from one, and none, then a notice."""
    import torch.distributed as dist
    from ray.train import Checkpoint

    dist.init_process_group("gloo", init_method=f"file://{root}/pg", rank=rank, world_size=2)
    spec = make_spec(Path(root), 1, {}, async_upload=False)
    run = func_mode.FuncRun(spec, rank, 2, ControlChannel(spec.control_url))
    steps: list[int] = []

    def report(files: dict[str, str] | None) -> None:
        if files is None:
            run.report({"loss": 1.0}, None, False)
        else:
            folder = Path(root, f"r{rank}-{len(steps)}")
            write_files({k: v.encode() for k, v in files.items()}, str(folder))
            run.report({"loss": 1.0}, Checkpoint.from_directory(str(folder)), False)
        steps.append(run.count)

    stopped_at = None
    try:
        report({f"rank-{rank}.txt": str(rank), "shared.txt": f"from {rank}"})  # both ranks: merged
        report(None)  # metrics only: a step of the clock, no checkpoint
        report({"rank-1-only.txt": "1"} if rank == 1 else None)  # another rank than 0 alone
        if rank == 0:
            run._preempt.set()  # the notice, as the watch thread sets it on rank 0
        report(None)  # agreed, but no checkpoint to commit: goes on
        report({"last.txt": "0"} if rank == 0 else None)  # committed, then both stop
        report(None)
    except func_mode.Stop as stop:
        stopped_at = stop.args[0]
    Path(root, f"rank{rank}.json").write_text(json.dumps({"steps": steps, "stopped_at": stopped_at}))
    dist.destroy_process_group()


def test_two_ranks_merge_their_folders_number_steps_alike_and_stop_together(tmp_path: Path) -> None:
    assert run_forked_ranks(_rank_main, [(rank, str(tmp_path)) for rank in (0, 1)]) == [0, 0]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    # Each report is a step; a checkpoint is committed as its report's step.
    assert ranks[0] == ranks[1] == {"steps": [1, 1, 3, 3], "stopped_at": 5}
    store = CheckpointStore(f"file://{tmp_path}/store", region="r", key=TEST_KEY)
    assert store.committed_steps("fn-unit") == [1, 3, 5]
    read = {
        step: {f.name: store.read(m, f.name) for f in m.files if not is_ours(f.name)}
        for step in (1, 3, 5)
        if (m := store.manifest("fn-unit", step))
    }
    assert read[1] == {"rank-0.txt": b"0", "rank-1.txt": b"1", "shared.txt": b"from 0"}
    assert read[3] == {"rank-1-only.txt": b"1"}
    assert read[5] == {"last.txt": b"0"}
    # Beside the function's files, both ranks' RNG states, whichever ranks passed a folder.
    for step in (1, 3, 5):
        m = store.manifest("fn-unit", step)
        assert m is not None and {f.name for f in m.files if is_ours(f.name)} == {rng_name(0), rng_name(1)}
    spec = make_spec(tmp_path, 1, {})
    assert [(e["step"], e["names"]) for e in events(spec, "checkpoint_merge_conflict")] == [(1, ["shared.txt"])]
    assert [e["step"] for e in events(spec, "preempted")] == [5]


SHARD_BYTES = 24 * 2**20


def _sharded_rank_main(rank: int, world: int, root: str) -> None:
    """One of ``world`` ranks, each reporting a folder as DCP writes one (its own shard,
    rank 0 the index too); rank 0 measures the Python memory it allocates while the
    report commits, then while a second attempt restores the whole folder."""
    import tracemalloc

    import torch.distributed as dist
    from ray.train import Checkpoint

    dist.init_process_group("gloo", init_method=f"file://{root}/pg", rank=rank, world_size=world)
    spec = make_spec(Path(root), 1, {}, async_upload=False)
    run = func_mode.FuncRun(spec, rank, world, ControlChannel(spec.control_url))
    folder = Path(root, f"r{rank}")
    files = {f"__{rank}_0.distcp": os.urandom(SHARD_BYTES)}
    if rank == 0:
        files[".metadata"] = b"index"
    write_files(files, str(folder))
    del files
    dist.barrier()
    if rank == 0:
        tracemalloc.start()
    run.report({"loss": 1.0}, Checkpoint.from_directory(str(folder)), False)
    run.wait_for_share()
    out: dict[str, int] = {}
    if rank == 0:
        out["commit_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    dist.barrier()
    # The next attempt: every rank reads the whole folder, one shard at a time.
    func_mode.RESTORE_BATCH_BYTES = SHARD_BYTES
    again = func_mode.FuncRun(make_spec(Path(root), 2, {}), rank, world, ControlChannel(spec.control_url))
    if rank == 0:
        tracemalloc.start()
    out["restored"] = again.restore()
    if rank == 0:
        out["restore_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert again.restored_dir is not None
    out["folder"] = sorted(p.name for p in Path(again.restored_dir).iterdir())  # type: ignore[assignment]
    shutil.rmtree(again.restored_dir)  # run() removes it; restore() alone leaves it to its caller
    Path(root, f"rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


def _sharded_run(root: Path, world: int) -> dict[str, int]:
    root.mkdir()
    args = [(rank, world, str(root)) for rank in range(world)]
    assert run_forked_ranks(_sharded_rank_main, args, deadline_s=120) == [0] * world
    ranks = [json.loads((root / f"rank{r}.json").read_text()) for r in range(world)]
    store = CheckpointStore(f"file://{root}/store", region="r", key=TEST_KEY)
    m = store.manifest("fn-unit", 1)
    names = [".metadata", *(f"__{r}_0.distcp" for r in range(world))]
    assert m is not None and sorted(f.name for f in m.files if not is_ours(f.name)) == sorted(names)
    assert all(r["restored"] == 1 and r["folder"] == sorted(names) for r in ranks)
    assert not events(make_spec(root, 1, {}), "checkpoint_merge_conflict")
    return ranks[0]


def test_no_rank_holds_another_ranks_files_and_rank_0s_memory_does_not_grow_with_the_world(tmp_path: Path) -> None:
    two, four = _sharded_run(tmp_path / "w2", 2), _sharded_run(tmp_path / "w4", 4)
    # Rank 0 reads its own shard and checks each other rank's in the store a chunk at a
    # time: twice the ranks, the same peak. Were the folders gathered on rank 0, it would
    # hold every rank's shard at once (four shards against two).
    assert four["commit_peak"] < two["commit_peak"] + SHARD_BYTES / 2, (two, four)
    assert two["commit_peak"] < 2.5 * SHARD_BYTES, two
    # The whole folder restored to disk one shard at a time: its peak does not grow either.
    assert four["restore_peak"] < two["restore_peak"] + SHARD_BYTES / 2, (two, four)
    assert two["restore_peak"] < 3.5 * SHARD_BYTES, two


def _fallback_rank_main(rank: int, root: str) -> None:
    """Two ranks reporting one shard each; the primary store is lost after the first
    commit (its folder becomes a file: every write there fails)."""
    import time

    import torch.distributed as dist
    from ray.train import Checkpoint

    dist.init_process_group("gloo", init_method=f"file://{root}/pg", rank=rank, world_size=2)
    spec = make_spec(Path(root), 1, {})
    spec = replace(spec, fallback_stores=[{"region": "b", "url": f"file://{root}/store-b"}], store_outage_s=0.3)
    run = func_mode.FuncRun(spec, rank, 2, ControlChannel(spec.control_url))

    def report(n: int) -> None:
        folder = Path(root, f"r{rank}-{n}")
        write_files({f"__{rank}_0.distcp": f"{rank}:{n}".encode()}, str(folder))
        run.report({"loss": 1.0}, Checkpoint.from_directory(str(folder)), False)

    report(1)
    run.checkpointer.wait() if rank == 0 else run.wait_for_share()
    dist.barrier()
    if rank == 0:
        Path(root, "store").rename(Path(root, "store-lost"))
        Path(root, "store").write_text("lost")
    dist.barrier()
    report(2)  # its shards go to the lost store: never committed
    if rank == 0:  # until rank 0's uploader has fallen back to store-b
        deadline = time.monotonic() + 30
        while run.checkpointer.store_index != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    dist.barrier()
    report(3)  # told store-b at the snapshot: committed there
    if rank == 0:
        run.checkpointer.wait(timeout_s=30)
    run.wait_for_share()
    dist.barrier()
    dist.destroy_process_group()


def test_after_a_fallback_every_rank_puts_into_the_store_rank_0_commits_to(tmp_path: Path) -> None:
    assert run_forked_ranks(_fallback_rank_main, [(rank, str(tmp_path)) for rank in (0, 1)]) == [0, 0]
    lost = CheckpointStore(f"file://{tmp_path}/store-lost", region="r", key=TEST_KEY)
    assert lost.committed_steps("fn-unit") == [1]
    b = CheckpointStore(f"file://{tmp_path}/store-b", region="b", key=TEST_KEY)
    m = b.manifest("fn-unit", 3)
    assert m is not None, b.committed_steps("fn-unit")
    theirs = {f.name: b.read(m, f.name) for f in m.files if not is_ours(f.name)}
    assert theirs == {"__0_0.distcp": b"0:3", "__1_0.distcp": b"1:3"}
    spec = make_spec(tmp_path, 1, {})
    fallbacks = events(spec, "store_fallback")
    assert len(fallbacks) == 1 and fallbacks[0]["to"] == "b", fallbacks
