"""The two loaders' data positions, without Ray: same batches after a resume, positions in checkpoints."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.runtime.loop.train_loop import _Loop, rng_state, set_rng_state
from orchestrator.runtime.loop.worker import UserCodeError
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.spec import RuntimeSpec
from orchestrator.workloads.data import DataMismatch, DataPosition, RayDataLoader, check_resumable, sharded_indices
from recovery.store import CheckpointStore
from tests.support.runs import loop_spec
from tests.support.stores import TEST_KEY


@pytest.fixture(autouse=True, scope="module")
def _restore_process_state() -> Iterator[None]:
    threads, state = torch.get_num_threads(), rng_state()
    yield
    set_rng_state(state)
    torch.set_num_threads(threads)


def _old_digits_indices(n: int, seed: int, batch_size: int, step: int, rank: int, world: int) -> torch.Tensor:
    # Digits.batch before the loaders existed: the weights of every sharded run depend on it.
    per_step = batch_size * world
    steps_per_epoch = max(1, n // per_step)
    epoch, k = divmod(step - 1, steps_per_epoch)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n, generator=gen)
    start = k * per_step + rank * batch_size
    return perm[start : start + batch_size]


def test_sharded_indices_are_the_batches_digits_always_used() -> None:
    for step in (1, 10, 11, 57, 500):
        for rank in (0, 1):
            assert torch.equal(
                sharded_indices(1347, 0, 64, step, rank, 2), _old_digits_indices(1347, 0, 64, step, rank, 2)
            )
    # The two ranks never share a row within a step.
    a, b = sharded_indices(1347, 3, 64, 7, 0, 2), sharded_indices(1347, 3, 64, 7, 1, 2)
    assert not set(a.tolist()) & set(b.tolist())


def test_positions_and_what_a_resume_needs() -> None:
    pos = DataPosition.after("sharded", 25, seed=0, steps_per_epoch=10)
    assert (pos.epoch, pos.batch_index, pos.step) == (2, 5, 25)
    check_resumable(pos.to_json(), pos)
    for field, value in (("loader", "ray_data"), ("seed", 1), ("steps_per_epoch", 11)):
        with pytest.raises(DataMismatch, match=field):
            check_resumable({**pos.to_json(), field: value}, pos)


class FakeShard:
    """Stands in for a Ray Data shard: rows 0..n-1 of a fixed order, shuffled by the seed given."""

    def __init__(self, rows: int, features: int = 3) -> None:
        self.data = torch.arange(rows * (features + 1), dtype=torch.float32).reshape(rows, features + 1)
        self.opened: list[int] = []

    def iter_torch_batches(self, **kw: Any) -> Iterator[dict[str, torch.Tensor]]:
        self.opened.append(int(kw["local_shuffle_seed"]))
        perm = torch.randperm(len(self.data), generator=torch.Generator().manual_seed(kw["local_shuffle_seed"]))
        bs = kw["batch_size"]
        for start in range(0, len(perm) - bs + 1, bs):
            yield {"data": self.data[perm[start : start + bs]]}


def _ray_data_batches(loader: RayDataLoader, steps: range) -> list[torch.Tensor]:
    return [loader.batch(step)[0] for step in steps]


def test_ray_data_loader_resumes_at_its_position_with_the_same_batches() -> None:
    # 2 workers, 100 rows: 50 per shard, batch 8 -> 6 batches an epoch.
    unbroken = RayDataLoader(FakeShard(50), 100, rank=0, world=2, seed=0, batch_size=8, buffer_rows=64)
    assert unbroken.steps_per_epoch == 6
    expected = _ray_data_batches(unbroken, range(1, 21))

    first = RayDataLoader(FakeShard(50), 100, rank=0, world=2, seed=0, batch_size=8, buffer_rows=64)
    before = _ray_data_batches(first, range(1, 15))
    shard = FakeShard(50)
    resumed = RayDataLoader(shard, 100, rank=0, world=2, seed=0, batch_size=8, buffer_rows=64)
    after = _ray_data_batches(resumed, range(15, 21))
    assert all(torch.equal(a, b) for a, b in zip(before + after, expected, strict=True))
    # Step 15 is batch 2 of epoch 2: the resumed loader opened epoch 2 (then 3) only.
    assert resumed.position(14) == DataPosition("ray_data", 2, 2, 0, 6)
    assert shard.opened == [2, 3]
    x, y = resumed.batch(21)
    assert x.shape == (8, 3) and y.dtype == torch.long


# --- the position in a real checkpoint ----------------------------------------------------------


def _spec(root: Path, generation: int, seed: int = 0) -> RuntimeSpec:
    return loop_spec(
        root,
        "pos",
        generation,
        {
            "name": "digits",
            "workload": "digits",
            "steps": 40,
            "seed": seed,
            "batch_size": 64,
            "lr": 0.05,
            "hidden_size": 32,
            "eval_fraction": 0.25,
        },
        data={"loader": "sharded"},
    )


def test_checkpoints_carry_the_data_position_and_a_mismatched_resume_is_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path, 1)
    _Loop(spec, rank=0, world=1, control=ControlChannel(spec.control_url)).run(wrap=lambda m: m)
    store = CheckpointStore(spec.store_url, region="r", key=TEST_KEY)
    m = store.manifest("pos", 40)
    assert m is not None
    state = torch.load(io.BytesIO(store.read(m, "state.pt")), weights_only=True)
    # 1347 training rows, batch 64, one worker: 21 steps an epoch.
    assert state["data"] == {"loader": "sharded", "epoch": 1, "batch_index": 19, "seed": 0, "steps_per_epoch": 21}
    final = ControlChannel(spec.control_url).read_final(1)
    assert final is not None and [w["rank"] for w in final["telemetry"]["workers"]] == [0]
    assert final["telemetry"]["workers"][0]["samples"] == 40 * 64

    other_seed = _spec(tmp_path, 2, seed=1)
    with pytest.raises(UserCodeError, match=r"job\.seed"):
        _Loop(other_seed, rank=0, world=1, control=ControlChannel(other_seed.control_url)).run(wrap=lambda m: m)
