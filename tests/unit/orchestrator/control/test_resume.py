"""A resumed controller (orchestrator/control/resume.py): what it looks at, what it adopts
and what it tears down; the plan, pure, one outcome per case; and one path for a resume on
the run's own machine and a takeover from the control store's mirror."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.control.context import RunContext
from orchestrator.control.resume import (
    Adopt,
    Adoption,
    Finish,
    Found,
    Recover,
    Restart,
    adoption_of,
    look,
    plan,
    sweep,
)
from orchestrator.runstate import events as E
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.state import RunView, fold
from orchestrator.wire.control import ControlChannel
from providers.base import ClusterHandle
from recovery.detection import Failure, FailureKind, Health, HealthCheck
from recovery.policy import Action, Decision

pytestmark = pytest.mark.unit
DEAD_PID = 2**22 + 12345  # above the default pid_max: never a live process
CANDIDATES = ["local-a", "local-b", "local-c"]


class Provider:
    name = "fake"
    capabilities: frozenset[str] = frozenset()

    def __init__(self, health: Health = Health.UP, records: dict[str, ClusterHandle] | None = None) -> None:
        self._health = health
        self.records = records or {}
        self.torn_down: list[str] = []

    def health(self, cluster: ClusterHandle) -> HealthCheck:
        return HealthCheck(self._health, 1.0, "no such cluster" if self._health is Health.GONE else "")

    def find(self, name: str) -> ClusterHandle | None:
        return self.records.get(name)

    def teardown(self, cluster: ClusterHandle) -> None:
        self.torn_down.append(cluster.name)


def _ctx(tmp_path: Path, provider: Provider) -> RunContext:
    journal = Journal(str(tmp_path / "journal.jsonl"))
    return RunContext(
        run_id="r",
        run_dir=str(tmp_path),
        cfg=None,  # type: ignore[arg-type]
        provider=provider,  # type: ignore[arg-type]
        control=ControlChannel(f"file://{tmp_path}/control"),
        emit=journal.emit,
        clock=lambda: 50.0,
    )


def _provisioned(name: str, region: str, generation: int, purpose: str = "attempt") -> E.Provisioned:
    return E.Provisioned(region, name, address="127.0.0.1:1", generation=generation, purpose=purpose, info={}, ts=2.0)


def _view(pid: int | None, *more: E.Event) -> RunView:
    """A run whose attempt 2 in local-a was provisioned (its driver ``pid``, if started)
    beside a standby in local-b, then its controller died."""
    events: list[E.Event] = [
        E.RunStarted(run_id="r", ts=1.0),
        E.Transition(RunState.PROVISIONING, RunState.PENDING, region="local-a", generation=2, ts=1.5),
        E.AttemptStarted(2, "local-a", ts=1.5),
        _provisioned("r-local-b-g1", "local-b", 1, purpose="standby"),
        _provisioned("r-local-a-g2", "local-a", 2),
        E.Fence(2, restored_step=20, ts=2.5),
        *([E.RuntimeStarted(pid, generation=2, ts=3.0)] if pid is not None else []),
        E.Transition(RunState.RUNNING, RunState.PROVISIONING, region="local-a", generation=2, ts=3.0),
        *more,
    ]
    return fold(events)


def _resume(ctx: RunContext, view: RunView) -> Adoption | None:
    """What Controller.resume does before it journals the plan: look, then sweep all but the adopted."""
    adopted = adoption_of(view, look(ctx, view, [], ctx.clock))
    sweep(ctx, view, keep=None if adopted is None else adopted.cluster)
    return adopted


# --- look and sweep: what is adopted, what is torn down --------------------------------------------


def test_a_live_attempt_is_adopted_and_everything_else_torn_down(tmp_path: Path) -> None:
    provider = Provider()
    adopted = _resume(_ctx(tmp_path, provider), _view(os.getpid()))
    assert adopted is not None and (adopted.generation, adopted.cluster.name) == (2, "r-local-a-g2")
    assert adopted.restored_step == 20
    assert provider.torn_down == ["r-local-b-g1"]


def test_a_live_attempt_on_a_cluster_whose_check_fails_once_is_adopted_one_gone_for_sure_is_not(
    tmp_path: Path,
) -> None:
    # A check that is not UP is a glitch to the watch that adopts it, not a reason to end it.
    glitch = Provider(Health.NOT_UP)
    assert _resume(_ctx(tmp_path / "a", glitch), _view(os.getpid())) is not None
    gone = Provider(Health.GONE)
    assert _resume(_ctx(tmp_path / "b", gone), _view(os.getpid())) is None
    assert sorted(gone.torn_down) == ["r-local-a-g2", "r-local-b-g1"]


def test_an_attempt_that_ended_with_a_word_is_adopted_for_its_outcome(tmp_path: Path) -> None:
    provider = Provider(Health.GONE)
    ctx = _ctx(tmp_path, provider)
    ctx.control.exited(2, 0)
    adopted = _resume(ctx, _view(DEAD_PID))
    assert adopted is not None and adopted.pid == DEAD_PID


def test_a_silent_dead_attempt_is_torn_down_like_the_rest(tmp_path: Path) -> None:
    provider = Provider()
    assert _resume(_ctx(tmp_path, provider), _view(DEAD_PID)) is None
    assert sorted(provider.torn_down) == ["r-local-a-g2", "r-local-b-g1"]
    journal = Journal(str(tmp_path / "journal.jsonl")).events()
    teardowns = [e for e in journal if e["type"] == "teardown"]
    assert len(teardowns) == 2 and all(e["reason"] == "left running by the crashed controller" for e in teardowns)
    # Each known attempt's ranks' logs are kept (here: asked for) before its cluster goes.
    assert [e["generation"] for e in journal if e["type"] == "logs_kept"] == [1, 2]


def test_a_cluster_launched_but_never_journaled_is_found_by_the_provider_and_torn_down(tmp_path: Path) -> None:
    handle = ClusterHandle("r-local-c-g3", "local-c", "fake", "127.0.0.1:2", {"head_pid": 1})
    provider = Provider(records={"r-local-c-g3": handle})
    view = fold([E.AttemptStarted(3, "local-c"), E.AttemptStarted(4, "local-a")])
    assert view.launching == (("local-c", 3), ("local-a", 4))
    assert _resume(_ctx(tmp_path, provider), view) is None
    assert provider.torn_down == ["r-local-c-g3"]


def test_a_crash_mid_launch_under_the_runs_region_name_is_found_and_torn_down(tmp_path: Path) -> None:
    # A provider that keeps runtimes names the attempt after the run and region alone.
    handle = ClusterHandle("r-local-c", "local-c", "fake", "127.0.0.1:2", {"head_pid": 1})
    provider = Provider(records={"r-local-c": handle})
    assert _resume(_ctx(tmp_path, provider), fold([E.AttemptStarted(3, "local-c")])) is None
    assert provider.torn_down == ["r-local-c"]


# --- the plan: one outcome per case, pure -----------------------------------------------------------

NOW = 50.0
CLUSTER = ClusterHandle("r-local-a-g2", "local-a", "fake", "127.0.0.1:1")
DECIDED: list[Failure] = []


def _decide(failure: Failure, now: float) -> Decision:
    DECIDED.append(failure)
    return Decision(Action.FAILOVER, "local-b", f"{failure.kind} in {failure.region}")


def _plan(view: RunView, **found: Any) -> Any:
    DECIDED.clear()
    return plan(view, Found(now=NOW, **found), CANDIDATES, "local-a", _decide)


def test_a_run_that_had_its_verdict_is_finished_with_its_last_attempts_final_report() -> None:
    ended = E.AttemptEnded(2, "local-a", last_step=60, outcome="succeeded", ts=9.0)
    done = _view(DEAD_PID, ended, E.Transition(RunState.SUCCEEDED, RunState.RUNNING, ts=9.5))
    assert _plan(done) == Finish(generation=2, succeeded=True)
    failed = _view(DEAD_PID, ended, E.Transition(RunState.FAILED, RunState.RUNNING, reason="x", ts=9.5))
    assert _plan(failed) == Finish(generation=2, succeeded=False)


def test_an_attempt_still_training_is_adopted_and_the_controllers_death_recorded_at_once() -> None:
    outcome = _plan(
        _view(os.getpid()), cluster=CLUSTER, health=HealthCheck(Health.UP, 1.0), alive=True, progress_step=35
    )
    assert isinstance(outcome, Adopt) and outcome.region == "local-a" and outcome.pending is None
    assert (outcome.adoption.generation, outcome.adoption.pid, outcome.adoption.cluster) == (2, os.getpid(), CLUSTER)
    crash = outcome.crash
    # From the dead controller's last sign of life (its last event), nothing restored, nothing lost.
    assert (crash.kind, crash.from_region, crash.to_region, crash.failed_at) == (
        "controller_lost",
        "local-a",
        "local-a",
        3.0,
    )
    assert (crash.last_step, crash.restored_step, crash.lost_steps, crash.first_step_at) == (35, 35, 0, NOW)


def test_an_attempt_gone_with_its_controller_is_ended_and_recovered_from_in_its_region() -> None:
    outcome = _plan(_view(DEAD_PID), cluster=CLUSTER, health=HealthCheck(Health.UP, 1.0), progress_step=35)
    assert isinstance(outcome, Recover) and outcome.region == "local-a"
    assert (outcome.ended.generation, outcome.ended.outcome, outcome.ended.last_step) == (2, "controller_lost", 35)
    assert outcome.opened and outcome.recovering and outcome.decided is None and not DECIDED
    assert (outcome.incident.kind, outcome.incident.generation, outcome.incident.detected_at) == (
        "controller_lost",
        2,
        NOW,
    )


def test_an_attempt_whose_cluster_went_too_is_recovered_from_where_the_policy_fails_over() -> None:
    gone = HealthCheck(Health.GONE, 1.0, "no such cluster")
    outcome = _plan(_view(DEAD_PID), cluster=CLUSTER, health=gone)
    assert isinstance(outcome, Recover) and outcome.region == "local-b" and outcome.incident.to_region == "local-b"
    (failure,) = DECIDED
    assert (failure.kind, failure.region) == (FailureKind.CLUSTER_LOST, "local-a")
    assert "found gone on resume: no such cluster" in failure.detail
    assert outcome.decided is not None and outcome.decided[1].region == "local-b"


def test_an_incident_open_when_the_controller_died_is_the_one_recovered_from() -> None:
    opened = E.IncidentOpened(
        kind="cluster_lost", from_region="local-c", to_region="local-a", failed_at=0.5, detected_at=0.7
    )
    outcome = _plan(_view(DEAD_PID, opened), cluster=CLUSTER, health=HealthCheck(Health.GONE, 1.0))
    assert isinstance(outcome, Recover) and not outcome.opened and outcome.decided is None
    assert (outcome.incident.kind, outcome.incident.from_region, outcome.region) == (
        "cluster_lost",
        "local-c",
        "local-a",
    )


def test_a_stopped_run_restarts_where_it_stopped_and_a_launch_the_stop_caught_is_ended() -> None:
    stopped = fold(
        [
            E.RunStarted(run_id="r", ts=1.0),
            E.Transition(RunState.PROVISIONING, RunState.PENDING, region="local-b", generation=1, ts=1.5),
            E.AttemptStarted(1, "local-b", ts=1.5),
            E.Transition(RunState.INTERRUPTED, RunState.PROVISIONING, reason="x", ts=2.0),
        ]
    )
    outcome = _plan(stopped)
    assert isinstance(outcome, Restart) and outcome.stopped and outcome.region == "local-b" and outcome.pending is None
    assert outcome.ended is not None and (outcome.ended.generation, outcome.ended.outcome) == (1, "interrupted")
    # A live driver of a stopped run is not adopted: it was stopped on purpose.
    assert isinstance(
        _plan(_view(os.getpid(), E.Transition(RunState.INTERRUPTED, RunState.RUNNING)), alive=True), Restart
    )


def test_a_run_between_two_attempts_restarts_where_its_last_decision_said() -> None:
    failed = _view(
        DEAD_PID,
        E.AttemptEnded(2, "local-a", last_step=40, outcome="cluster_lost", ts=4.0),
        E.DecisionMade(Action.FAILOVER, FailureKind.CLUSTER_LOST, "local-c", "x", failed_region="local-a", ts=4.1),
        E.IncidentOpened(
            kind="cluster_lost",
            from_region="local-a",
            to_region="local-c",
            failed_at=3.9,
            detected_at=4.0,
            generation=2,
            last_step=40,
            ts=4.2,
        ),
        E.Transition(RunState.RECOVERING, RunState.RUNNING, failure="cluster_lost", to_region="local-c", ts=4.3),
    )
    outcome = _plan(failed)
    assert isinstance(outcome, Restart) and not outcome.stopped and outcome.ended is None
    assert outcome.region == "local-c" and outcome.pending is not None and outcome.pending.kind == "cluster_lost"
