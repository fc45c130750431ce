"""The run's view (orchestrator/runstate/state.py): apply() and fold() of the journal's typed events."""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import Any

import pytest

from orchestrator.runstate import event_json as J
from orchestrator.runstate import events as E
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.result import record_from
from orchestrator.runstate.state import RunView, UserErrorSeen, apply, fold, planned_total
from recovery.detection import FailureKind
from recovery.policy import Action
from tests.unit.orchestrator.runstate.test_events import _journey
from tests.unit.orchestrator.runstate.test_replay import ev

pytestmark = pytest.mark.unit


def _snapshot(value: Any) -> Any:
    """A deep, plain copy of a view (mapping proxies included), to compare before and after."""
    if is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple((f.name, _snapshot(getattr(value, f.name))) for f in fields(value)))
    if hasattr(value, "items"):
        return tuple((k, _snapshot(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(_snapshot(v) for v in value)
    if isinstance(value, set | frozenset):
        return frozenset(value)
    return value


def test_apply_never_changes_the_view_it_is_given() -> None:
    view = RunView()
    for event in [J.from_json(e) for e in _journey()]:
        before = _snapshot(view)
        after = apply(view, event)
        assert _snapshot(view) == before
        view = after
    assert view.leftover and view.started
    with pytest.raises(TypeError):
        view.leftover["x"] = view.leftover[next(iter(view.leftover))]  # type: ignore[index]


def test_a_failed_notification_moves_only_the_clock() -> None:
    view = fold(J.from_json(e) for e in _journey())
    failed = E.NotifyFailed("command", "succeeded", "exited with status 1", endpoint="notify.sh", ts=view.last_ts + 5)
    assert apply(view, failed) == replace(view, last_ts=view.last_ts + 5)


def test_a_notify_target_turned_off_moves_only_the_clock() -> None:
    view = fold(J.from_json(e) for e in _journey())
    off = E.NotifyOff("command", "notify.secret is another run's", endpoint="notify.sh", ts=view.last_ts + 5)
    assert apply(view, off) == replace(view, last_ts=view.last_ts + 5)


def test_open_attempt_and_launching_come_from_apply_alone() -> None:
    view = fold(J.from_json(e) for e in [ev("attempt_started", generation=1, region="a")])
    assert view.launching == (("a", 1),) and view.open_attempt is not None
    view = apply(view, J.from_json(ev("provisioned", region="a", cluster="r-a-g1", generation=1)))
    assert view.launching == () and view.open_attempt is not None and view.open_attempt.cluster is not None


def test_the_view_has_what_the_result_needs() -> None:
    view = fold(J.from_json(e) for e in _journey())
    assert view.status == "FAILED" and view.reason == "user error"
    assert view.verdict is not None and view.verdict.region == "local-b"
    # The attempt's first user error, not a later rank's.
    assert view.error_traceback == "Traceback ...\nValueError: x"
    assert view.user_error == UserErrorSeen("ValueError: x", step=90, site="m.py:4")
    # The run gave up on that user error: result.json names it.
    assert record_from(view, "r", None, 0.0).user_error == {"error": "ValueError: x", "step": 90, "site": "m.py:4"}
    assert view.replications == 2 and view.last_lag_s == 0.5 and len(view.skipped) == 3
    assert (view.current_region, view.current_generation) == ("local-b", 2)
    assert [a.as_dict() for a in view.attempt_lines] == [
        {"generation": 1, "region": "local-a", "outcome": "cluster_lost"},
        {"generation": 2, "region": "local-b", "outcome": "user_error"},
    ]


SEARCH = {"enabled": True, "search_space": {"lr": "loguniform 0.01 0.2", "hidden_size": "choice 32 64"},
          "num_samples": 6, "max_t": 6}  # fmt: skip


def test_the_planned_total_is_the_one_the_runs_progress_reports() -> None:
    # digits_hpo: job.steps 150 is unused by a search; its progress counts 6 trials x (6 + 1) search steps.
    assert planned_total({"job": {"steps": 150}, "hpo": SEARCH}) == 42
    assert planned_total({"job": {"steps": 150}, "hpo": {**SEARCH, "enabled": False}}) == 150
    # A train function: the reports its config declares, else no total (not job.steps).
    assert planned_total({"job": {"steps": 500, "train_func": "m:f", "params": {"epochs": 5}}}) == 5
    assert planned_total({"job": {"steps": 500, "train_func": "m:f", "params": {}}}) is None
    # A damaged copy cannot tell.
    assert planned_total({"job": {"steps": "x"}}) is None
    assert planned_total({"job": {}, "hpo": {"enabled": True, "search_space": {"lr": "nope"}}}) is None


def test_a_run_failed_by_something_else_names_no_user_error() -> None:
    journey = _journey()
    decision = next(i for i, e in enumerate(journey) if e["type"] == "decision" and e["action"] == "give_up")
    journey[decision] = {**journey[decision], "failure": "cluster_lost"}
    view = fold(J.from_json(e) for e in journey)
    assert view.user_error is not None and record_from(view, "r", None, 0.0).user_error is None


def test_a_decisions_signature_is_folded_into_the_history_a_resumed_controller_decides_with() -> None:
    line = ev(
        "decision", action="restart_in_place", region="a", failure="user_error", failed_region="a", signature="12:ab"
    )
    view = fold([J.from_json(line)])
    assert view.history.user_error == "12:ab" and view.history.restarts_on_errors == 1
    # A decision journaled without one (no user error, or an older journal) reads as before.
    plain = ev("decision", action="restart_in_place", region="a", failure="user_error", failed_region="a")
    assert fold([J.from_json(plain)]).history.user_error == ""
    assert "signature" not in J.to_json(E.DecisionMade(action=Action.FAILOVER, failure=FailureKind.CLUSTER_LOST))


def test_a_kept_runtime_is_the_runs_until_it_is_swept_or_its_name_is_launched_again() -> None:
    def at(view: RunView, type_: str, **fields: Any) -> RunView:
        return apply(view, J.from_json(ev(type_, **fields)))

    view = at(RunView(), "provisioned", region="a", cluster="r-a", generation=1)
    view = at(view, "teardown", cluster="r-a", runtime_kept=True)
    assert not view.leftover and list(view.kept_runtimes) == ["r-a"]
    # Launched again under its name: live, owned, nothing kept to sweep.
    again = at(view, "provisioned", region="a", cluster="r-a", generation=3)
    assert list(again.leftover) == ["r-a"] and not again.kept_runtimes
    assert not at(view, "runtime_swept", cluster="r-a").kept_runtimes
    # A teardown that kept nothing leaves nothing to sweep.
    plain = at(at(RunView(), "provisioned", region="a", cluster="r-a-g1", generation=1), "teardown", cluster="r-a-g1")
    assert not plain.kept_runtimes and not plain.leftover


def test_the_attempt_the_controller_holds_is_its_launch_or_its_adoption_and_none_after_a_resume() -> None:
    S = RunState
    view = fold([E.RunStarted(run_id="r")])
    assert view.holding is None
    view = apply(view, E.Transition(S.PROVISIONING, S.PENDING, region="local-a", generation=1))
    assert view.holding == ("local-a", 1)
    view = apply(view, E.Transition(S.RUNNING, S.PROVISIONING, region="local-a", generation=1))
    view = apply(view, E.Transition(S.RECOVERING, S.RUNNING, failure="cluster_lost", to_region="local-b"))
    assert view.holding == ("local-a", 1), "deciding moves nothing: the next launch does"
    view = apply(view, E.RunResumed(pid=2, state=S.RECOVERING))
    assert view.holding is None
    assert apply(view, E.AttemptAdopted(1, "local-a", "r-local-a-g1")).holding == ("local-a", 1)


def test_the_training_groups_nodes_are_the_runtimes_last_train_started_word() -> None:
    started = {"restored_step": 0, "generation": 1, "time": 1.0}
    view = fold([E.RuntimeReport("train_started", {**started, "by": "runtime", "worker_nodes": [3, 0, 3, True]})])
    assert view.worker_nodes == (0, 3)
    # An older attempt's word is not the group's; a restart that names none leaves none known.
    assert apply(
        view, E.RuntimeReport("train_started", {**started, "by": "zombie", "worker_nodes": [5]})
    ).worker_nodes == (0, 3)
    assert apply(view, E.RuntimeReport("train_started", {**started, "by": "runtime"})).worker_nodes == ()
