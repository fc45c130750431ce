"""The run state machine: only the lifecycle's edges, each reported to the listener."""

from __future__ import annotations

import pytest

from orchestrator.runstate.lifecycle import ALLOWED, IllegalTransition, RunState, StateMachine

S = RunState


def test_failover_path_reaches_succeeded_and_the_listener_sees_every_transition() -> None:
    seen: list[tuple[RunState, RunState, dict[str, object]]] = []
    sm = StateMachine(lambda prev, new, info: seen.append((prev, new, info)))
    path = [
        (S.PROVISIONING, {"region": "local-a", "generation": 1}),
        (S.RUNNING, {}),
        (S.RECOVERING, {"kind": "cluster_lost"}),
        (S.PROVISIONING, {"region": "local-b", "generation": 2}),
        (S.RUNNING, {}),
        (S.SUCCEEDED, {"final_step": 500}),
    ]
    for new, info in path:
        assert sm.to(new, **info)[1] is new
        assert sm.state is new
    prevs = [S.PENDING] + [new for new, _ in path[:-1]]
    assert seen == [(prev, new, info) for prev, (new, info) in zip(prevs, path, strict=True)]


@pytest.mark.parametrize(
    ("start", "new"),
    [
        (S.PENDING, S.RUNNING),
        (S.PENDING, S.SUCCEEDED),
        (S.PROVISIONING, S.SUCCEEDED),
        (S.RECOVERING, S.RUNNING),
        (S.RUNNING, S.PROVISIONING),
        (S.INTERRUPTED, S.RUNNING),
        (S.INTERRUPTED, S.SUCCEEDED),
        (S.INTERRUPTED, S.RECOVERING),
    ],
)
def test_illegal_transition_raises_and_changes_nothing(start: RunState, new: RunState) -> None:
    seen: list[object] = []
    sm = StateMachine(lambda *a: seen.append(a), state=start)
    with pytest.raises(IllegalTransition, match=f"{start} -> {new}"):
        sm.to(new)
    assert sm.state is start
    assert seen == []


@pytest.mark.parametrize("end", [S.SUCCEEDED, S.FAILED])
@pytest.mark.parametrize("new", list(RunState))
def test_nothing_leaves_a_terminal_state(end: RunState, new: RunState) -> None:
    sm = StateMachine(state=end)
    with pytest.raises(IllegalTransition):
        sm.to(new)


@pytest.mark.parametrize("start", [S.PENDING, S.PROVISIONING, S.RUNNING, S.RECOVERING])
@pytest.mark.parametrize("stop", [S.FAILED, S.INTERRUPTED])
def test_every_live_state_can_fail_or_be_interrupted(start: RunState, stop: RunState) -> None:
    sm = StateMachine(state=start)
    sm.to(stop, reason="x")
    assert sm.state is stop


def test_an_interrupted_run_resumes_into_a_new_attempt_and_can_be_interrupted_again() -> None:
    sm = StateMachine(state=S.RUNNING)
    for new in (S.INTERRUPTED, S.PROVISIONING, S.RUNNING, S.INTERRUPTED, S.PROVISIONING, S.RUNNING, S.SUCCEEDED):
        sm.to(new)
    assert sm.state is S.SUCCEEDED


def test_only_succeeded_failed_and_cancelled_are_terminal_and_interrupted_is_stopped() -> None:
    assert {s for s in RunState if s.terminal} == {S.SUCCEEDED, S.FAILED, S.CANCELLED}
    assert {s for s in RunState if s.stopped} == {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.INTERRUPTED}
    # A cancel ends a run from any live state, and nothing goes on from it (not even a resume).
    for live in (S.PENDING, S.PROVISIONING, S.RUNNING, S.RECOVERING):
        assert S.CANCELLED in ALLOWED[live]
    assert not ALLOWED[S.CANCELLED] and S.CANCELLED not in ALLOWED[S.INTERRUPTED]
