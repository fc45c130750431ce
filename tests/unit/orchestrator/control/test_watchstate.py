"""The watch as a fold (orchestrator/control/watchstate.py): what happened to an attempt folded
into a frozen state by a pure apply, fault times in typed marks, and the verdict a pure
function of the state and one look."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import pytest

from orchestrator.control import watchstate as ws
from orchestrator.runstate.incidents import Incident
from orchestrator.wire.faults import NODE_FAULTS, REGION_FAULTS
from orchestrator.wire.schema import Event as WireEvent
from recovery.detection import Failure, FailureKind, Health, Lease

pytestmark = pytest.mark.unit
LEASE = Lease(interval_s=1.0, timeout_s=5.0, failures_to_lose=3)
PENDING = Incident("cluster_lost", "local-a", "local-b", failed_at=10.0, detected_at=11.0, last_step=60, generation=1)


def _fold(*happened: ws.Happened, **start: object) -> ws.WatchState:
    state = ws.start(2, "local-b", 20.0, **start)  # type: ignore[arg-type]
    for h in happened:
        before, copy = state, replace(state)
        state = ws.apply(before, h)
        assert before == copy and ws.apply(before, h) == state, "apply is pure"
    return state


def test_the_state_is_frozen_and_apply_returns_a_new_one() -> None:
    state = ws.start(2, "local-b", 20.0)
    with pytest.raises(FrozenInstanceError):
        state.last_step = 5  # type: ignore[misc]
    assert ws.apply(state, ws.Preempted(30)) is not state and state.last_step == 0


def test_the_marks_date_a_region_failure_in_the_wires_order_and_keep_only_the_kinds_that_date_one() -> None:
    kinds = ("kill_region", "kill_head", "hang_region", "partition", "partition_region", "preempt")
    assert kinds == tuple(REGION_FAULTS) and set(NODE_FAULTS) < ws.MARKED
    marks = ws.FaultMarks().struck("preempt", ws.FaultMark(5.0, 10)).struck("hang_region", ws.FaultMark(7.0, 12))
    assert marks.region_fault_at() == 7.0  # hang_region comes before preempt
    assert ws.FaultMarks().struck("corrupt_checkpoint", ws.FaultMark(1.0, 1)) == ws.FaultMarks()
    # A notice dates a preemption only when no injection did first.
    assert marks.noticed(9.0).preempt == ws.FaultMark(5.0, 10)
    assert ws.FaultMarks().noticed(9.0).preempt == ws.FaultMark(9.0)


def test_the_first_start_is_the_restore_the_pending_incident_recovers_to_and_the_first_report_past_it_records_it() -> (
    None
):
    state = _fold(ws.TrainStarted(21.0, restored_step=50), pending=PENDING, last_step=60)
    assert state.restored_step == 50 and state.pending is not None and state.pending.restored_step == 50
    assert ws.apply(state, ws.Progressed(50, 22.0)).recorded == ()  # not past its restore yet
    state = ws.apply(state, ws.Progressed(51, 23.0, {"restored_step": 50, "resumed_at": 22.5}))
    (recorded,) = state.recorded
    assert state.pending_recorded and recorded == state.pending
    assert (recorded.first_step_at, recorded.lost_steps, recorded.rto_s) == (22.5, 10, 12.5)


def test_a_restart_in_place_is_a_worker_lost_dated_by_its_kill_or_the_last_report() -> None:
    killed = _fold(
        ws.TrainStarted(21.0, 0),
        ws.Progressed(40, 25.0),
        ws.FaultFired("kill_worker", 26.0, 38),
        ws.Progressed(39, 26.5),  # written before the kill, read after it: the kill's step stands
        ws.TrainStarted(27.0, 20),
    )
    (inc,) = killed.opened
    assert (inc.kind, inc.failed_at, inc.detected_at, inc.last_step, inc.restored_step) == (
        "worker_lost",
        26.0,
        27.0,
        40,
        20,
    )
    assert killed.faults.kill_worker is None and not killed.step_raised
    unexplained = _fold(ws.TrainStarted(21.0, 0), ws.Progressed(40, 25.0), ws.TrainStarted(27.0, 20))
    (inc,) = unexplained.opened
    assert (inc.failed_at, inc.last_step) == (25.0, 40)


def test_a_restart_after_a_node_loss_is_a_node_lost_owed_to_the_node_fault_and_an_idle_node_owes_none() -> None:
    loss = ws.NodeLossSeen(node=2, at=30.0, last_step=44, world_before=None, replace_s=3.5)
    state = _fold(
        ws.TrainStarted(21.0, 0, world=2),
        ws.FaultFired("hang_node", 29.0, 45),
        ws.TrainStarted(33.0, 40, world=2, loss=loss),
    )
    (inc,) = state.opened
    assert (inc.kind, inc.node, inc.failed_at, inc.detected_at, inc.last_step) == ("node_lost", 2, 29.0, 30.0, 45)
    assert (inc.world_size_before, inc.world_size_after, inc.replace_s) == (2, 2, 3.5)
    idle = _fold(ws.FaultFired("kill_node", 29.0, 45), ws.IdleNodeLost())
    assert idle.faults.kill_node is None and idle.faults.hang_node is None


def test_runtime_events_become_what_the_watch_folds_and_the_first_user_error_is_the_attempts() -> None:
    def event(kind: str, **fields: object) -> WireEvent:
        return WireEvent(kind, 5.0, 2, fields)

    first = ws.from_runtime(event("user_error", error="ValueError: a", step=7, site="m.py:3", deterministic=True))
    assert first == ws.UserErrorReported("ValueError: a", 7, "m.py:3", repeats=True)
    later = ws.from_runtime(event("user_error", error="ValueError: b"))
    assert _fold(first, later).user_error == first  # type: ignore[arg-type]
    assert ws.from_runtime(event("preempted", step=30)) == ws.Preempted(30)
    assert ws.from_runtime(event("preemption_notice")) == ws.PreemptionNoticed(5.0)
    assert ws.from_runtime(event("train_started", restored_step=20, world_size=3)) == ws.TrainStarted(5.0, 20, 3)
    assert ws.from_runtime(event("replicated", step=20)) is None


def test_health_looks_count_a_streak_once_per_look_of_the_providers() -> None:
    state = _fold(
        ws.HealthLooked(1.0, Health.NOT_UP), ws.HealthLooked(1.0, Health.NOT_UP), ws.HealthLooked(2.0, Health.NOT_UP)
    )
    assert (state.failed_checks, state.health) == (2, Health.NOT_UP)
    assert ws.apply(state, ws.HealthLooked(3.0, Health.UP)).failed_checks == 0


def _judge(state: ws.WatchState, **look: object) -> ws.Verdict:
    obs = ws.observation(state, look.pop("code", None), look.pop("health", Health.UP), look.pop("age", 0.5), 30.0, None)  # type: ignore[arg-type]
    return ws.judge(state, obs, LEASE, 30.0, new_look=True, **look)  # type: ignore[arg-type]


def test_the_verdict_goes_on_succeeds_or_dates_the_failure_by_the_region_fault_then_the_heartbeat() -> None:
    state = _fold(ws.TrainStarted(21.0, 0))
    assert _judge(state, heartbeat_at=29.5, killed_at=None) == ws.Going(glitch=False)
    assert _judge(state, code=0, heartbeat_at=29.5, killed_at=None) == ws.Done(glitch=False)
    assert _judge(
        ws.apply(state, ws.HealthLooked(1.0, Health.NOT_UP)), health=Health.NOT_UP, heartbeat_at=29.5, killed_at=None
    ) == ws.Going(glitch=True)
    gone = _judge(state, code=-9, health=Health.GONE, heartbeat_at=29.5, killed_at=None)
    assert isinstance(gone, ws.Lost) and gone.failure.kind is FailureKind.CLUSTER_LOST
    assert (gone.detected_at, gone.failed_at) == (30.0, 29.5)
    assert _judge(state, code=-9, health=Health.GONE, heartbeat_at=None, killed_at=None).failed_at == 30.0  # type: ignore[union-attr]
    assert _judge(state, code=-9, health=Health.GONE, heartbeat_at=29.5, killed_at=28.0).failed_at == 28.0  # type: ignore[union-attr]
    killed = ws.apply(state, ws.FaultFired("kill_region", 27.0, 10))
    assert _judge(killed, code=-9, health=Health.GONE, heartbeat_at=29.5, killed_at=28.0).failed_at == 27.0  # type: ignore[union-attr]


def test_a_user_error_the_runtime_reported_is_the_verdicts_with_its_step_and_site() -> None:
    state = _fold(ws.TrainStarted(21.0, 0), ws.UserErrorReported("ValueError: a", 7, "m.py:3"))
    lost = _judge(state, code=3, heartbeat_at=29.5, killed_at=None)
    assert isinstance(lost, ws.Lost) and lost.failure.kind is FailureKind.USER_ERROR
    event = ws.failure_event(state, lost, ws.observation(state, 3, Health.UP, 0.5, 30.0, None))
    assert (event.kind, event.region, event.runtime_exit, event.detected_after_s) == ("user_error", "local-b", 3, 0.5)


def test_a_final_report_past_the_jobs_last_step_never_becomes_the_step_known_done() -> None:
    state = _fold(ws.Progressed(55, 25.0))
    assert ws.apply(state, ws.FinalRead({"final_step": 60}, 60, 60)).last_step == 60
    forged = ws.apply(state, ws.FinalRead({"final_step": 10**12}, 10**12, 60))
    assert forged.succeeded and forged.last_step == 55 and forged.final == {"final_step": 10**12}
    failed = ws.apply(state, ws.FailureFound(Failure(FailureKind.PREEMPTED, "local-b"), 30.0, 28.0))
    assert (failed.failure.kind, failed.detected_at, failed.failed_at) == (FailureKind.PREEMPTED, 30.0, 28.0)  # type: ignore[union-attr]


def test_a_long_streak_of_glitches_is_journaled_up_to_the_count_that_could_lose_the_cluster() -> None:
    state = ws.start(2, "local-b", 20.0)
    obs = ws.observation(replace(state, failed_checks=3), None, Health.NOT_UP, 0.5, 30.0, None)
    event = ws.glitch_event(state, Health.NOT_UP, "no answer", obs, LEASE)
    assert event is not None and (event.failed_checks, event.detail) == (3, "no answer")
    assert ws.glitch_event(state, Health.NOT_UP, "", replace(obs, failed_checks=4), LEASE) is None
