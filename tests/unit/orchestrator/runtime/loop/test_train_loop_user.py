"""A user's workload in the training loop, without Ray: dataset() sampling, a scheduler,
gradient accumulation, clipping, autocast and the workload's own state all go into every
checkpoint, and a run resumed after a crash ends bitwise equal to an unbroken one."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.runtime.loop.train_loop import _Loop, rng_state, set_rng_state, to_device
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.spec import RuntimeSpec
from orchestrator.workloads.data import DatasetLoader
from recovery.store import CheckpointStore
from tests.support.paths import FIXTURES
from tests.support.runs import loop_spec
from tests.support.stores import TEST_KEY

FIXTURE = FIXTURES / "tinywork.py"
STEPS = 60


@pytest.fixture(autouse=True)
def _user_package(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """tinywork importable from a folder outside the repository, as a user's package is."""
    folder = tmp_path_factory.mktemp("userpkg")
    shutil.copy(FIXTURE, folder / "tinywork.py")
    monkeypatch.syspath_prepend(str(folder))
    threads, state = torch.get_num_threads(), rng_state()
    yield
    set_rng_state(state)
    torch.set_num_threads(threads)


def spec(root: Path, run_id: str, generation: int, **trainer: Any) -> RuntimeSpec:
    return loop_spec(
        root,
        run_id,
        generation,
        {
            "name": "tiny",
            "workload": "tinywork:Tiny",
            "params": {"step_size": 30, "lr": 0.3},
            "steps": STEPS,
            "seed": 3,
            "batch_size": 32,
        },
        trainer={
            "grad_accum_steps": 2,
            "grad_clip_norm": 5.0,
            "autocast": "none",
            "torch_threads": 1,
            **trainer,
        },
    )


def no_ddp(model: torch.nn.Module) -> torch.nn.Module:
    return model


def run_to_end(s: RuntimeSpec) -> dict[str, Any]:
    control = ControlChannel(s.control_url)
    _Loop(s, rank=0, world=1, control=control).run(wrap=no_ddp)
    final = control.read_final(s.generation)
    assert final is not None and final["final_step"] == STEPS
    return final


class _Crash(RuntimeError):
    pass


def crash_at(s: RuntimeSpec, step: int) -> None:
    loop = _Loop(s, rank=0, world=1, control=ControlChannel(s.control_url))
    real = loop.data.batch

    def batch(at: int, micro: int = 0) -> Any:
        if at == step:
            raise _Crash(f"died at step {at}")
        return real(at, micro)

    loop.data.batch = batch  # type: ignore[method-assign]
    with pytest.raises(_Crash):
        loop.run(wrap=no_ddp)


@pytest.mark.parametrize("autocast", ["none", "bf16"])
def test_a_user_workload_resumed_after_a_crash_ends_bitwise_equal(tmp_path: Path, autocast: str) -> None:
    unbroken = run_to_end(spec(tmp_path / "unbroken", "u", 1, autocast=autocast))

    crash_at(spec(tmp_path, "resumed", 1, autocast=autocast), 47)
    store = CheckpointStore(f"file://{tmp_path}/store", region="r", key=TEST_KEY)
    assert store.committed_steps("resumed") == [20, 40]
    names = {f.name for f in store.manifest("resumed", 40).files}
    assert {"model.pt", "optimizer.pt", "scheduler.pt", "workload.pt", "state.pt", "rng-rank0.pt"} <= names

    second = spec(tmp_path, "resumed", 2, autocast=autocast)
    final = run_to_end(second)
    started = [e for e in ControlChannel(second.control_url).read_events(2, set()) if e["type"] == "train_started"]
    assert [e["restored_step"] for e in started] == [40]
    assert final["weights_sha256"] == unbroken["weights_sha256"]
    # The workload's own state came back too: loss() ran once per micro-batch, 2 per step.
    assert final["metrics"]["loss_calls"] == unbroken["metrics"]["loss_calls"] == 2 * STEPS
    assert final["metrics"]["accuracy"] > 0.5


def test_the_scheduler_steps_once_per_optimizer_step(tmp_path: Path) -> None:
    s = spec(tmp_path, "lr", 1)
    loop = _Loop(s, rank=0, world=1, control=ControlChannel(s.control_url))
    for step in range(1, 61):
        loop.train_step(loop.model, step)
    # StepLR(step_size=30, gamma=0.5) after 60 optimizer steps: lr halved twice.
    assert loop.optimizer.param_groups[0]["lr"] == pytest.approx(0.3 * 0.25)
    assert loop.workload.calls == 120


def test_clipping_bounds_the_gradient_norm(tmp_path: Path) -> None:
    s = spec(tmp_path, "clip", 1, grad_clip_norm=1e-3, grad_accum_steps=1)
    loop = _Loop(s, rank=0, world=1, control=ControlChannel(s.control_url))
    loop.train_step(loop.model, 1)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in loop.model.parameters()]))
    assert norm.item() <= 1e-3 * 1.0001


def test_a_checkpoint_without_a_part_the_run_has_is_refused_by_name(tmp_path: Path) -> None:
    """A run that adds a scheduler cannot silently resume a checkpoint written without one."""
    from orchestrator.runtime.loop.worker import UserCodeError

    crash_at(spec(tmp_path, "parts", 1), 25)
    store = CheckpointStore(f"file://{tmp_path}/store", region="r", key=TEST_KEY)
    m = store.manifest("parts", 20)
    kept = [f for f in m.files if f.name != "scheduler.pt"]
    store.commit("parts", 20, m.attempt, kept, extra=m.extra)
    with pytest.raises(UserCodeError, match="no scheduler state"):
        _Loop(spec(tmp_path, "parts", 2), rank=0, world=1, control=ControlChannel(f"file://{tmp_path}/control")).run(
            wrap=no_ddp
        )


# --- dataset() sampling ---------------------------------------------------------------------------


class Numbers(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 100

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.tensor([float(i)]), i


def test_ranks_share_each_global_batch_without_overlap_and_epochs_cover_the_set() -> None:
    world, accum, batch = 2, 2, 24  # 6 rows per rank per micro-batch; 8 micro-batches an epoch
    loaders = [DatasetLoader(Numbers(), r, world, seed=5, global_batch=batch, accum=accum) for r in range(world)]
    assert loaders[0].steps_per_epoch == 100 // 12
    epoch = [i for micro in range(1, 9) for loader in loaders for i in loader.indices(micro)]
    assert len(epoch) == len(set(epoch)) == 96  # no index twice in an epoch; the tail is dropped
    # One optimizer step (2 micro-batches x 2 ranks) is the global batch: 24 distinct indices.
    step1 = [i for micro in (1, 2) for loader in loaders for i in loader.indices(micro)]
    assert len(set(step1)) == batch
    # Epoch 2 is another permutation, and the same seed gives the same stream.
    assert loaders[0].indices(9) != loaders[0].indices(1)
    again = DatasetLoader(Numbers(), 0, world, seed=5, global_batch=batch, accum=accum)
    assert [again.indices(i) for i in (9, 3, 1)] == [loaders[0].indices(i) for i in (9, 3, 1)]
    assert loaders[0].position(10).to_json()["epoch"] == 1


def test_a_batch_is_collated_by_pytorch_and_a_too_small_dataset_is_named() -> None:
    b = DatasetLoader(Numbers(), 1, 2, seed=0, global_batch=8, accum=1).batch(1)
    x, y = b
    assert x.shape == (4, 1) and y.shape == (4,) and torch.equal(x[:, 0].long(), y)
    with pytest.raises(ValueError, match="fewer than one micro-batch"):
        DatasetLoader(Numbers(), 0, 2, seed=0, global_batch=400, accum=1)


def test_to_device_leaves_cpu_batches_alone_and_keeps_the_structure() -> None:
    batch = {"x": torch.ones(2), "pair": (torch.zeros(1), 3)}
    assert to_device(batch, torch.device("cpu")) is batch
    moved = to_device(batch, torch.device("meta"))
    assert moved["x"].device.type == "meta" and isinstance(moved["pair"], tuple) and moved["pair"][1] == 3


def test_an_exception_in_the_users_loss_is_reported_as_a_user_error_with_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a Ray Train worker does with it (the same entry the cluster runs, in Ray's local mode):
    the controller gets a user_error event carrying the workload's own traceback, and the
    exception goes on up (Ray Train fails the attempt; the policy does not fail over)."""

    from ray.train.v2._internal.execution import train_fn_utils as ray_fn_utils
    from ray.train.v2._internal.execution.train_fn_utils import LocalTrainFnUtils

    from orchestrator.runtime.loop.train_loop import train_func

    # SkyPilot leaves sys.tracebacklimit at 0 after an exception passes its UX wrapper
    monkeypatch.setattr(sys, "tracebacklimit", 0, raising=False)
    s = spec(tmp_path, "bug", 1)
    s = replace(s, job=replace(s.job, params={**s.job.params, "fail_at_call": 11}))
    before = ray_fn_utils._train_fn_utils
    ray_fn_utils.set_train_fn_utils(LocalTrainFnUtils(experiment_name="unit"))
    try:
        with pytest.raises(ValueError, match="tinywork: bad batch at call 11"):
            train_func({"spec": s.to_plain()})
    finally:
        ray_fn_utils.set_train_fn_utils(before)
    (err,) = [e for e in ControlChannel(s.control_url).read_events(1, set()) if e["type"] == "user_error"]
    assert err["error"].startswith("ValueError: tinywork: bad batch at call 11")
    assert "tinywork.py" in err["traceback"] and "in loss" in err["traceback"]
    # Our own frames (the loop that called loss()) are left out, and said to be.
    assert "orchestrator/runtime" not in err["traceback"] and "of the orchestrator left out" in err["traceback"]
    # Plain bounded fields the controller decides with: the step (2 micro-batches a step:
    # call 11 is step 6's first) and the innermost frame in the user's file.
    assert err["step"] == 6 and err["site"].endswith("tinywork.py:71")
    # Raised at one call only: run once more, the micro-batch trains, so not known for a bug.
    assert "deterministic" not in err.fields


def _user_error_of(tmp_path: Path, params: dict[str, Any]) -> Any:
    from ray.train.v2._internal.execution import train_fn_utils as ray_fn_utils
    from ray.train.v2._internal.execution.train_fn_utils import LocalTrainFnUtils

    from orchestrator.runtime.loop.train_loop import train_func

    s = spec(tmp_path, "bug", 1)
    s = replace(s, job=replace(s.job, params={**s.job.params, **params}))
    before = ray_fn_utils._train_fn_utils
    ray_fn_utils.set_train_fn_utils(LocalTrainFnUtils(experiment_name="unit"))
    try:
        with pytest.raises(ValueError):
            train_func({"spec": s.to_plain()})
    finally:
        ray_fn_utils.set_train_fn_utils(before)
    (err,) = [e for e in ControlChannel(s.control_url).read_events(1, set()) if e["type"] == "user_error"]
    return err


def test_a_user_error_raised_again_when_its_micro_batch_is_run_once_more_is_known_for_a_bug(
    tmp_path: Path,
) -> None:
    # From call 12 on (step 6's second micro-batch): the replay of that very micro-batch
    # raises the same again, so the controller can give up without a second launch.
    err = _user_error_of(tmp_path, {"fail_from_call": 12})
    assert err["error"] == "ValueError: tinywork: loss broken from call 12"
    assert err["step"] == 6 and err["deterministic"] is True
