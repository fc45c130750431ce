"""Rank 0's restore choice, run while the worker builds its model (orchestrator/runtime/loop/worker.py)."""

from __future__ import annotations

import threading

import pytest

from orchestrator.runtime.loop.worker import Prefetch, WorkerAttempt, is_comm_failure, release_frames, restored_by_rank0

pytestmark = pytest.mark.unit


def test_prefetch_runs_at_once_and_hands_back_its_value() -> None:
    started, go = threading.Event(), threading.Event()

    def choose() -> tuple[int, str]:
        started.set()
        go.wait(5)
        return 0, "manifest"

    p = Prefetch(choose)
    assert started.wait(5)  # running before anyone asks for it
    go.set()
    assert p.result() == (0, "manifest")


def test_prefetch_raises_what_the_choice_raised_where_it_is_taken() -> None:
    def choose() -> None:
        raise RuntimeError("injected by chaos.faults[0]")

    p = Prefetch(choose)
    with pytest.raises(RuntimeError, match="injected"):
        p.result()


def test_rank0_keeps_the_shared_state_and_its_own_rng_only() -> None:
    assert restored_by_rank0("model.pt") and restored_by_rank0("state.pt") and restored_by_rank0("rng-rank0.pt")
    assert not restored_by_rank0("rng-rank1.pt")


def _timed(began: float, chosen: float | None) -> WorkerAttempt:
    attempt = object.__new__(WorkerAttempt)
    attempt.choice_began, attempt.choice_ended = began, chosen
    return attempt


def test_a_restores_time_is_its_choice_and_its_load_their_overlap_counted_once() -> None:
    # Chosen (0-3) before the model was built (restore called at 5): 3 s choice + 2 s load.
    assert _timed(0.0, 3.0).restore_work_s(5.0, 7.0) == 5.0
    # Still choosing when called at 2 (chosen at 6, loaded by 7): 6 s of choice + 1 s of load.
    assert _timed(0.0, 6.0).restore_work_s(2.0, 7.0) == 7.0
    # No choice made (rank > 0): the load alone.
    assert _timed(4.0, None).restore_work_s(4.0, 5.5) == 1.5
    # A standby chooses inside its restore (4-5), then loads (5-5.5): all of it, once.
    assert _timed(4.0, 5.0).restore_work_s(4.0, 5.5) == 1.5


def gloo_error() -> RuntimeError:
    return RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:4527")


def test_a_collective_broken_by_a_lost_peer_is_a_comm_failure_however_wrapped() -> None:
    assert is_comm_failure(gloo_error())
    # Wrapped, as a user's code or DDP may raise it.
    try:
        try:
            raise gloo_error()
        except RuntimeError as inner:
            raise ValueError("step failed") from inner
    except ValueError as outer:
        assert is_comm_failure(outer)


def test_the_workloads_own_error_is_no_comm_failure() -> None:
    assert not is_comm_failure(ValueError("shapes do not match"))
    assert not is_comm_failure(ZeroDivisionError())


def test_a_released_failure_holds_none_of_its_frames_locals() -> None:
    class Held:
        pass

    def step() -> None:
        held = Held()  # noqa: F841  (what a failed step's frame keeps alive)
        raise gloo_error()

    try:
        step()
    except RuntimeError as exc:
        caught = exc
    frames = []
    tb = caught.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    assert any("held" in f.f_locals for f in frames)
    release_frames(caught)
    assert not any("held" in f.f_locals for f in frames)
