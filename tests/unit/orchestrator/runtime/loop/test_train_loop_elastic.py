"""The elastic training loop without Ray: a run of trainer.workers = L logical workers
trained by a world of w <= L. Worlds above one are real gloo process groups on
127.0.0.1 (forked ranks, DDP as Ray Train's prepare_model puts it), a world of one
runs in this process.

What is proved: at w == L the arithmetic is the fixed-world one, bit for bit; a
smaller world ends close to the full one (TOL_* below, quoted in the README); a run
resumed at an unchanged world is bitwise its own continuation, also after an elastic
phase; restore takes a checkpoint of the same L at any w and refuses another L.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.runtime.loop.dataflow import WorkerData
from orchestrator.runtime.loop.train_loop import (
    _Loop,
    elastic_share,
    rng_file,
    rng_state,
    saved_worlds,
    set_rng_state,
    to_device,
)
from orchestrator.runtime.loop.worker import UserCodeError
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.schema import WireError, parse_final, parse_progress
from orchestrator.wire.sections import DataSection, JobSection
from orchestrator.wire.spec import RuntimeSpec
from orchestrator.workloads.data import DatasetLoader
from recovery.store import CheckpointStore
from tests.support.paths import FIXTURES
from tests.support.runs import loop_spec, run_forked_ranks
from tests.support.stores import TEST_KEY

FIXTURE = FIXTURES / "tinywork.py"
RUN = "el"
RANK_DEADLINE_S = 60

JOBS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # The built-in workload on the sharded loader, one micro-batch a step.
    "digits": (
        {
            "name": "digits",
            "workload": "digits",
            "steps": 120,
            "seed": 0,
            "batch_size": 64,
            "lr": 0.05,
            "hidden_size": 256,
            "eval_fraction": 0.25,
        },
        {},
    ),
    # A user's dataset() workload: accumulation, clipping, a scheduler and state of its own.
    "tiny": (
        {
            "name": "tiny",
            "workload": "tinywork:Tiny",
            "params": {"step_size": 30, "lr": 0.3},
            "steps": 120,
            "seed": 3,
            "batch_size": 32,
        },
        {"grad_accum_steps": 2, "grad_clip_norm": 5.0},
    ),
}


@pytest.fixture(autouse=True, scope="module")
def _process_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """tinywork importable as a user's package is; the loop seeds the global RNGs and sets
    torch's threads: leave the process as found."""
    import sys

    folder = tmp_path_factory.mktemp("userpkg")
    shutil.copy(FIXTURE, folder / "tinywork.py")
    sys.path.insert(0, str(folder))
    threads, state = torch.get_num_threads(), rng_state()
    yield
    set_rng_state(state)
    torch.set_num_threads(threads)
    sys.path.remove(str(folder))


def spec(root: Path, job: str, workers: int, generation: int = 1, min_workers: int = 1) -> RuntimeSpec:
    j, trainer = JOBS[job]
    return loop_spec(
        root,
        RUN,
        generation,
        j,
        trainer={**trainer, "workers": workers, "min_workers": min_workers},
        # Every checkpoint committed: a crash test counts on step 60.
        checkpoint={"async_upload": False},
    )


class _Crash(RuntimeError):
    pass


def _train(s: RuntimeSpec, rank: int, world: int, crash_at: int | None) -> None:
    """One rank of a world: the loop to the end, or until every rank dies at ``crash_at``."""
    loop = _Loop(s, rank=rank, world=world, control=ControlChannel(s.control_url))
    if crash_at is not None:
        real = loop.data.batch

        def batch(step: int, micro: int = 0) -> Any:
            if step == crash_at:
                raise _Crash(f"died at step {step}")
            return real(step, micro)

        loop.data.batch = batch  # type: ignore[method-assign]

    def ddp(model: torch.nn.Module) -> torch.nn.Module:
        return torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model

    with pytest.raises(_Crash) if crash_at is not None else contextlib.nullcontext():
        loop.run(wrap=ddp)


def _rank_main(s: RuntimeSpec, rank: int, world: int, crash_at: int | None, root: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{root}/pg-{s.generation}", rank=rank, world_size=world)
    try:
        _train(s, rank, world, crash_at)
    finally:
        dist.destroy_process_group()


def train(s: RuntimeSpec, world: int, crash_at: int | None = None) -> dict[str, Any] | None:
    """The run of ``s`` at ``world`` workers; its final (None after a crash)."""
    if world == 1:
        _train(s, 0, 1, crash_at)
    else:
        root = Path(s.ray_storage_path).parent
        root.mkdir(parents=True, exist_ok=True)  # the ranks meet in a file there
        args = [(s, r, world, crash_at, str(root)) for r in range(world)]
        assert run_forked_ranks(_rank_main, args, RANK_DEADLINE_S) == [0] * world
    final = ControlChannel(s.control_url).read_final(s.generation)
    assert (final is None) == (crash_at is not None)
    return final


def store(root: Path) -> CheckpointStore:
    return CheckpointStore(f"file://{root}/store", region="r", key=TEST_KEY)


def events(s: RuntimeSpec, kind: str) -> list[dict[str, Any]]:
    return [e for e in ControlChannel(s.control_url).read_events(s.generation, set()) if e["type"] == kind]


# --- 1. at the full world nothing changes --------------------------------------------------------


class _FixedWorld(_Loop):
    """The training step as it was before elastic worlds, verbatim, and its own loaders:
    the rank's micro-batches of the run's world, loss / accum with accumulation."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        dataset = getattr(self.workload, "dataset", None)
        self.old = (
            DatasetLoader(dataset(), self.rank, self.world, self.spec.job.seed, self.spec.job.batch_size, self.accum)
            if callable(dataset)
            else None
        )

    def old_batch(self, step: int, micro: int) -> Any:
        i = (step - 1) * self.accum + micro + 1
        return self.old.batch(i) if self.old is not None else self.workload.batch(i, self.rank, self.world)

    def train_step(self, ddp: torch.nn.Module, step: int) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        total: torch.Tensor | None = None
        for micro in range(self.accum):
            batch = to_device(self.old_batch(step, micro), self.device)
            last = micro == self.accum - 1 or not hasattr(ddp, "no_sync")
            with contextlib.nullcontext() if last else ddp.no_sync():
                with self._autocast():
                    loss = self.workload.loss(ddp, batch)
                if self.accum > 1:
                    loss = loss / self.accum
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            total = loss.detach() if total is None else total + loss.detach()
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        assert total is not None
        return total


@pytest.mark.parametrize("job", ["digits", "tiny"])
def test_at_the_full_world_the_weights_are_bitwise_the_fixed_world_loops(tmp_path: Path, job: str) -> None:
    """L = w = 1 in this process (trainer.min_workers below L or not: the same code path)."""
    elastic = spec(tmp_path / "elastic", job, workers=1)
    _Loop(elastic, rank=0, world=1, control=ControlChannel(elastic.control_url)).run(wrap=lambda m: m)
    fixed = spec(tmp_path / "fixed", job, workers=1)
    _FixedWorld(fixed, rank=0, world=1, control=ControlChannel(fixed.control_url)).run(wrap=lambda m: m)
    new, old = ControlChannel(elastic.control_url).read_final(1), ControlChannel(fixed.control_url).read_final(1)
    assert new is not None and old is not None
    assert new["weights_sha256"] == old["weights_sha256"]


# --- 2. a smaller world ends close ----------------------------------------------------------------


# --- 3. exact again at an unchanged world -----------------------------------------------------------


@pytest.fixture(scope="module")
def at_one(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """L=2 trained by one worker: (the uninterrupted run, a run that died at step 70)."""
    whole = tmp_path_factory.mktemp("one-whole")
    assert train(spec(whole, "tiny", workers=2), world=1) is not None
    crashed = tmp_path_factory.mktemp("one-crashed")
    train(spec(crashed, "tiny", workers=2), world=1, crash_at=70)
    assert store(crashed).committed_steps(RUN) == [20, 40, 60]
    return whole, crashed


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_a_world_of_one_resumed_at_one_is_bitwise_its_own_continuation(tmp_path: Path, at_one: Any) -> None:
    whole, crashed = at_one
    root = _copy(crashed, tmp_path / "run")
    resumed = train(spec(root, "tiny", workers=2, generation=2), world=1)
    unbroken = ControlChannel(spec(whole, "tiny", workers=2).control_url).read_final(1)
    assert resumed is not None and unbroken is not None
    assert resumed["weights_sha256"] == unbroken["weights_sha256"]
    # The workload's own state came back: one loss() call per micro-batch, both shards on one worker.
    assert resumed["metrics"]["loss_calls"] == unbroken["metrics"]["loss_calls"] == 2 * 2 * 120


# --- 4. what a restore takes --------------------------------------------------------------------


def test_a_checkpoint_of_another_trainer_workers_is_refused_by_name(tmp_path: Path, at_one: Any) -> None:
    _, crashed = at_one
    root = _copy(crashed, tmp_path / "run")
    s = spec(root, "tiny", workers=1, generation=2)
    with pytest.raises(UserCodeError, match=r"trainer.workers=2, this run has 1; resume it with trainer.workers=2 "):
        _Loop(s, rank=0, world=1, control=ControlChannel(s.control_url)).run(wrap=lambda m: m)


def test_a_checkpoint_from_before_elastic_worlds_is_taken_at_a_smaller_world(tmp_path: Path, at_one: Any) -> None:
    """Its manifest has world_size alone (then always trainer.workers): its L is that."""
    _, crashed = at_one
    root = _copy(crashed, tmp_path / "run")
    st = store(root)
    m = st.manifest(RUN, 60)
    assert m is not None
    st.commit(RUN, 60, m.attempt, m.files, extra={"world_size": 2})
    s = spec(root, "tiny", workers=2, generation=2)
    assert train(s, world=1) is not None
    assert [e["restored_step"] for e in events(s, "train_started")] == [60]


def test_what_a_checkpoint_says_of_its_worlds_and_which_rng_state_a_rank_takes() -> None:
    assert saved_worlds({"world_size": 1, "workers": 2}, 2) == (1, 2)
    assert saved_worlds({"world_size": 2}, 4) == (2, 2)  # before elastic worlds: w was L
    assert saved_worlds({}, 3) == (3, 3)
    saved = {"rng-rank0.pt", "rng-rank1.pt"}
    assert [rng_file(r, 2, saved) for r in range(3)] == ["rng-rank0.pt", "rng-rank1.pt", "rng-rank0.pt"]
    assert [rng_file(r, 1, {"rng-rank0.pt"}) for r in range(2)] == ["rng-rank0.pt", "rng-rank0.pt"]


def test_a_world_outside_min_workers_to_workers_is_refused(tmp_path: Path) -> None:
    s = spec(tmp_path, "digits", workers=3, min_workers=2)
    with pytest.raises(ValueError, match=r"trainer.min_workers \(2\) to trainer.workers \(3\)"):
        _Loop(s, rank=0, world=1, control=ControlChannel(s.control_url))


# --- the data and the arithmetic, pure ----------------------------------------------------------


class _Ids:
    """A workload whose sharded batch is which (micro-batch, logical rank, logical world) it is."""

    def train_size(self) -> int:
        return 10_000

    def batch(self, step: int, rank: int, world: int) -> tuple[int, int, int]:
        return (step, rank, world)


def _data(loader: str, rank: int, world: int, workers: int, accum: int, workload: Any) -> WorkerData:
    job = JobSection.from_plain({"name": "t", "workload": "digits", "steps": 10, "seed": 7, "batch_size": 12})
    return WorkerData(DataSection.from_plain({"loader": loader}), job, workload, rank, world, accum, workers)


@pytest.mark.parametrize("accum", [1, 2])
def test_every_world_trains_the_full_worlds_micro_batches_once_a_step(accum: int) -> None:
    workers = 3
    for world in range(1, workers + 1):
        datas = [_data("sharded", r, world, workers, accum, _Ids()) for r in range(world)]
        for step in (1, 5):
            got = sorted(d.batch(step, m) for d in datas for m in range(d.micro_batches))
            want = sorted(((step - 1) * accum + m + 1, s, workers) for s in range(workers) for m in range(accum))
            assert got == want
        # The data position is the logical world's, whatever trains it.
        assert {d.position(7).to_json()["steps_per_epoch"] for d in datas} == {10_000 // (12 * workers)}


class _Rows(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 240

    def __getitem__(self, i: int) -> int:
        return i


class _DatasetWorkload:
    def dataset(self) -> _Rows:
        return _Rows()


def test_a_dataset_workloads_global_batch_is_the_same_rows_at_every_world() -> None:
    workers, accum = 3, 2  # 12 rows a step: 2 per logical rank per micro-batch
    steps: dict[int, list[list[int]]] = {}
    for world in range(1, workers + 1):
        datas = [_data("sharded", r, world, workers, accum, _DatasetWorkload()) for r in range(world)]
        steps[world] = [
            sorted(int(i) for d in datas for m in range(d.micro_batches) for i in d.batch(s, m)) for s in (1, 2, 11)
        ]
        assert {d.position(3).to_json()["steps_per_epoch"] for d in datas} == {240 // (2 * workers)}
    assert steps[1] == steps[2] == steps[3]
    assert all(len(set(rows)) == 12 for rows in steps[3])


def test_the_elastic_share_makes_ddps_mean_the_mean_over_every_logical_micro_batch() -> None:
    for workers, accum in [(2, 1), (3, 2), (4, 3)]:
        for world in range(1, workers + 1):
            per_rank = [len(range(r, workers, world)) * accum for r in range(world)]
            assert sum(per_rank) == workers * accum
            # Every micro-batch weighs share; DDP divides the ranks' sum by world.
            assert sum(n * elastic_share(world, workers, accum) for n in per_rank) / world == pytest.approx(1.0)


def test_progress_and_final_carry_an_optional_world_size() -> None:
    base = {"time": 1.0, "generation": 1, "step": 3}
    assert parse_progress({**base, "world_size": 2}).fields["world_size"] == 2
    assert "world_size" not in parse_progress(base).fields  # a file from before still reads
    with pytest.raises(WireError):
        parse_progress({**base, "world_size": 0})
    final = {"time": 1.0, "generation": 1, "final_step": 3}
    assert parse_final({**final, "world_size": 1}).fields["world_size"] == 1
    with pytest.raises(WireError):
        parse_final({**final, "world_size": "two"})
