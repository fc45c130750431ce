"""The training loop without Ray: RNG state round trip, and a resumed run bitwise equal to an unbroken one."""

from __future__ import annotations

import io
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from orchestrator.runtime.loop.train_loop import _Loop, rng_state, set_rng_state
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.spec import RuntimeSpec
from recovery.store import CheckpointStore
from tests.support.runs import loop_spec
from tests.support.stores import TEST_KEY

FlipByte = Callable[[CheckpointStore, str, int, str], None]
CRASH_AT = 70


@pytest.fixture(autouse=True, scope="module")
def _restore_process_state() -> Iterator[None]:
    """_Loop seeds the global RNGs and sets torch's thread count; leave the process as found."""
    threads = torch.get_num_threads()
    state = rng_state()
    yield
    set_rng_state(state)
    torch.set_num_threads(threads)


def draws() -> list[float]:
    return [
        *torch.rand(3).tolist(),
        random.random(),
        random.gauss(0.0, 1.0),
        *np.random.standard_normal(3).tolist(),
        float(np.random.randint(0, 1 << 30)),
    ]


def test_rng_state_round_trips_through_torch_save_and_weights_only_load() -> None:
    torch.manual_seed(1)
    random.seed(2)
    np.random.seed(3)
    random.gauss(0.0, 1.0)  # leaves a cached second normal in python's state
    np.random.standard_normal()  # and in numpy's
    buf = io.BytesIO()
    torch.save(rng_state(), buf)
    expected = draws()

    torch.manual_seed(99)
    random.seed(99)
    np.random.seed(99)
    set_rng_state(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert draws() == expected


# --- exact resume -----------------------------------------------------------------------------


def spec(root: Path, run_id: str, generation: int, async_upload: bool = True) -> RuntimeSpec:
    return loop_spec(
        root,
        run_id,
        generation,
        {
            "name": "digits",
            "workload": "digits",
            "steps": 120,
            "seed": 0,
            "batch_size": 64,
            "lr": 0.05,
            "hidden_size": 32,
            "eval_fraction": 0.25,
        },
        # The resume tests count on every checkpoint committed: with uploads in the
        # background a newer snapshot replaces one still waiting (by design), so on a
        # loaded machine step 40 may never be written.
        checkpoint={"async_upload": async_upload},
    )


def no_ddp(model: torch.nn.Module) -> torch.nn.Module:
    return model


class _Crash(RuntimeError):
    pass


def run_to_end(s: RuntimeSpec) -> dict[str, Any]:
    control = ControlChannel(s.control_url)
    _Loop(s, rank=0, world=1, control=control).run(wrap=no_ddp)
    final = control.read_final(s.generation)
    assert final is not None
    assert final["final_step"] == 120
    return final


def crash_at(s: RuntimeSpec, step: int) -> None:
    loop = _Loop(s, rank=0, world=1, control=ControlChannel(s.control_url))
    real_batch = loop.workload.batch

    def batch(at: int, rank: int, world: int) -> Any:
        if at == step:
            raise _Crash(f"died at step {at}")
        return real_batch(at, rank, world)

    loop.workload.batch = batch  # type: ignore[method-assign]
    with pytest.raises(_Crash):
        loop.run(wrap=no_ddp)
    assert ControlChannel(s.control_url).read_final(s.generation) is None


@pytest.fixture(scope="module")
def unbroken_sha(tmp_path_factory: pytest.TempPathFactory) -> str:
    final = run_to_end(spec(tmp_path_factory.mktemp("unbroken"), "unbroken", 1))
    return str(final["weights_sha256"])


def events(s: RuntimeSpec) -> list[dict[str, Any]]:
    return ControlChannel(s.control_url).read_events(s.generation, set())


def test_run_resumed_after_a_crash_restores_step_60_and_ends_bitwise_equal(tmp_path: Path, unbroken_sha: str) -> None:
    crash_at(spec(tmp_path, "resumed", 1, async_upload=False), CRASH_AT)
    assert CheckpointStore(f"file://{tmp_path}/store", key=TEST_KEY).committed_steps("resumed") == [20, 40, 60]

    second = spec(tmp_path, "resumed", 2)
    final = run_to_end(second)
    started = [e for e in events(second) if e["type"] == "train_started"]
    assert [e["restored_step"] for e in started] == [60]
    assert final["weights_sha256"] == unbroken_sha


def test_resume_past_a_corrupt_newest_checkpoint_restores_step_40_and_ends_bitwise_equal(
    tmp_path: Path, unbroken_sha: str, flip_byte: FlipByte
) -> None:
    crash_at(spec(tmp_path, "resumed", 1, async_upload=False), CRASH_AT)
    flip_byte(CheckpointStore(f"file://{tmp_path}/store", region="r", key=TEST_KEY), "resumed", 60, "model.pt")

    second = spec(tmp_path, "resumed", 2)
    final = run_to_end(second)
    evs = events(second)
    skipped = [e for e in evs if e["type"] == "checkpoint_skipped"]
    assert [(e["step"], e["region"]) for e in skipped] == [(60, "r")]
    assert "model.pt" in skipped[0]["reason"]
    assert [e["restored_step"] for e in evs if e["type"] == "train_started"] == [40]
    assert final["weights_sha256"] == unbroken_sha


def test_a_fault_at_a_step_waits_for_rank_0s_commit_on_every_rank(tmp_path: Path, monkeypatch) -> None:
    """A kill_worker strikes the last rank, which uploads nothing: rank 0 commits first, then all meet."""
    import torch.distributed as dist

    s = spec(tmp_path, "quiesce", 1)
    s = replace(s, trainer=replace(s.trainer, workers=2), faults=[{"kind": "kill_worker", "at_step": 41}])
    loop = _Loop(s, rank=0, world=2, control=ControlChannel(s.control_url))
    calls: list[str] = []
    monkeypatch.setattr(loop.checkpointer, "wait", lambda *a, **k: calls.append("commit"))
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: calls.append("barrier"))
    loop.chaos_hook(40)
    assert calls == []  # no fault due: no collective on an ordinary step
    loop.chaos_hook(41)
    assert calls == ["commit", "barrier"]  # rank 0 is not the victim: it commits and lets it go
    assert ControlChannel(s.control_url).chaos_requests() == {}


def _raised_from(exc: BaseException, cause: BaseException) -> BaseException:
    try:
        raise exc from cause
    except BaseException as e:
        return e


def test_platform_failures_under_the_workload_are_not_user_errors() -> None:
    import ray.exceptions as rx

    from orchestrator.runtime.loop.worker import InjectedUserError, is_infra_error

    died = rx.ActorDiedError()  # Ray Data's coordinator, gone with its node
    assert is_infra_error(died)
    assert is_infra_error(rx.RayTaskError("read", "tb", died))  # a task that failed because of it
    assert is_infra_error(rx.RayTaskError("read", "tb", died).as_instanceof_cause())
    assert is_infra_error(_raised_from(RuntimeError("batch failed"), rx.NodeDiedError("node 127.0.0.1 died")))
    assert is_infra_error(RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer"))
    # A rank whose process group Ray Train tore down mid-restart (torch raises a ValueError).
    no_group = "Default process group has not been initialized, please make sure to call init_process_group."
    assert is_infra_error(ValueError(no_group))
    # A checkpoint that went bad between rank 0's check and another rank's read.
    from recovery.manifest import ManifestError
    from recovery.store import StoreError

    assert is_infra_error(ManifestError("step-100/model.pt does not match its manifest"))
    assert is_infra_error(StoreError("region local-b: store file:///s: cannot read step-100/model.pt"))
    # The workload's own errors, also when Ray carries them from a task.
    assert not is_infra_error(ValueError("bad shape"))
    assert not is_infra_error(InjectedUserError("injected"))
    assert not is_infra_error(rx.RayTaskError("preprocess", "tb", KeyError("label")))


def test_a_fault_during_an_upload_lands_before_the_next_step_trains(tmp_path: Path, unbroken_sha: str) -> None:
    """The uploader waits for the controller to fire; training must not run on meanwhile,
    or what a kill there costs would depend on how quickly the controller answers."""
    import threading
    import time

    s = spec(tmp_path, "upload-fault", 1)
    s = replace(s, faults=[{"kind": "kill_worker", "during": "checkpoint_upload"}])
    control = ControlChannel(s.control_url)
    loop = _Loop(s, rank=0, world=1, control=control)
    trained: list[int] = []
    real_batch = loop.workload.batch

    def batch(at: int, rank: int, world: int) -> Any:
        trained.append(at)
        return real_batch(at, rank, world)

    loop.workload.batch = batch  # type: ignore[method-assign]
    seen: dict[str, Any] = {}

    def controller() -> None:  # answers the rendezvous slowly, as a loaded controller does
        while not (requests := control.chaos_requests()):
            time.sleep(0.01)
        seen["request"], seen["trained_then"] = requests[0], max(trained)
        time.sleep(0.5)
        seen["trained_after_wait"] = max(trained)
        control.chaos_fired(0, 1, step=requests[0].step)

    ctl = threading.Thread(target=controller, daemon=True)
    ctl.start()
    loop.run(wrap=no_ddp)
    ctl.join(timeout=10)
    assert seen["request"].step == 20 and seen["request"].during == "checkpoint_upload"
    # Held at the step the upload belongs to until the fault fired, then on to the end, exactly.
    assert seen["trained_then"] == seen["trained_after_wait"] == 20
    assert control.read_final(1)["weights_sha256"] == unbroken_sha
