"""Notifications (orchestrator/notify/notifier.py): which events make one and what it says, event by
event; delivery to a real HTTP server on 127.0.0.1 and to a real command, in order and
bounded; and whole runs of the controller's loop over the scripted provider
(tests/support/fakecloud.py) that notify a server and a command of an incident, a failover and
the end, or meet a webhook that hangs or refuses, and end exactly as they would without
one, the failures journaled as ``notify_failed`` without the URL's secret. The targets'
secrets are in no file of the run but notify.secret (0600): a resumed controller reads
them back from there, and goes on without those a missing or damaged one cannot give."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

import orchestrator.control.watch as watch
from orchestrator.config.compose import compose
from orchestrator.control.wiring import build_controller
from orchestrator.notify.notifier import notification
from orchestrator.runstate import events as E
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.rundir import NOTIFY_SECRET
from orchestrator.runstate.state import RunView, fold
from recovery.detection import FailureKind
from recovery.policy import Action
from tests.support.fakecloud import FakeCloud
from tests.unit.orchestrator.runstate.test_events import SAMPLES

pytestmark = pytest.mark.unit
RUN = "notified"
TOKEN = "T0K3N-s3cr3t"
KEYS = {
    "run_id",
    "kind",
    "job",
    "status",
    "regions",
    "step",
    "rto_s",
    "failure",
    "reason",
    "restored_step",
    "lost_steps",
    "time",
    "ts",
}


# --- which events notify, and what they say ------------------------------------------------------


def _running_in(region: str, generation: int = 1, *more: E.Event) -> RunView:
    return fold(
        [
            E.RunStarted(run_id=RUN, ts=100.0),
            E.Transition(RunState.PROVISIONING, RunState.PENDING, region=region, generation=generation, ts=101.0),
            E.AttemptStarted(generation, region, ts=101.0),
            E.Transition(RunState.RUNNING, RunState.PROVISIONING, region=region, generation=generation, ts=102.0),
            *more,
        ]
    )


def _notes(event: E.Event, view: RunView) -> dict[str, Any] | None:
    # The controller hands each event over with the view it leads to.
    from orchestrator.runstate.state import apply

    note = notification(event, apply(view, event), RUN, "digits")
    if note is not None:
        assert set(note) == KEYS
        assert json.loads(json.dumps(note)) == note
    return note


def test_a_failure_detected_is_an_incident_with_its_kind_and_one_line_of_why() -> None:
    event = E.FailureDetected(
        "cluster_lost", region="local-a", detail="the cluster's head is gone\nmore", last_step=60, ts=1_700_000_000.5
    )
    note = _notes(event, _running_in("local-a"))
    assert note == {
        "run_id": RUN,
        "kind": "incident",
        "job": "digits",
        "status": "RUNNING",
        "regions": ["local-a"],
        "step": 60,
        "rto_s": None,
        "failure": "cluster_lost",
        "reason": "the cluster's head is gone",
        "restored_step": None,
        "lost_steps": None,
        "time": "2023-11-14T22:13:20.500Z",
        "ts": 1_700_000_000.5,
    }


def test_a_launch_that_failed_is_an_incident_in_the_policys_words_and_a_standbys_is_none() -> None:
    view = fold([E.RunStarted(run_id=RUN), E.Transition(RunState.PROVISIONING, RunState.PENDING, region="local-a")])
    failed = E.ProvisionFailed("local-a", kind="timeout", error="not up within 60s\ntrace", purpose="attempt")
    note = _notes(failed, view)
    assert note is not None
    assert (note["kind"], note["status"], note["failure"], note["reason"]) == (
        "incident",
        "PROVISIONING",
        "provision_timeout",
        "not up within 60s",
    )
    assert _notes(E.ProvisionFailed("local-b", kind="no_capacity", error="none", purpose="standby"), view) is None


def test_a_failover_is_told_when_its_incident_closes_with_the_regions_and_the_rto() -> None:
    recorded = E.IncidentRecorded(
        kind="cluster_lost",
        from_region="local-a",
        to_region="local-b",
        failed_at=110.0,
        detected_at=110.5,
        last_step=60,
        restored_step=50,
        first_step_at=125.0,
        generation=1,
        rto_s=15.0,
        lost_steps=10,
        ts=125.1,
    )
    note = _notes(recorded, _running_in("local-b", 2))
    assert note is not None
    assert {k: note[k] for k in ("kind", "status", "regions", "step", "rto_s", "failure", "restored_step")} == {
        "kind": "failover",
        "status": "RUNNING",
        "regions": ["local-a", "local-b"],
        "step": 60,
        "rto_s": 15.0,
        "failure": "cluster_lost",
        "restored_step": 50,
    }
    assert note["lost_steps"] == 10 and note["reason"] is None
    # The new region failed before its first step: the move is told, with no RTO.
    never = E.IncidentRecorded(kind="preempted", from_region="local-a", to_region="local-b", failed_at=1, detected_at=2)
    assert _notes(never, _running_in("local-b", 2)) is not None
    assert _notes(never, _running_in("local-b", 2))["rto_s"] is None  # type: ignore[index]


def test_a_restart_in_place_is_no_news_twice_but_a_recovery_nothing_else_announced_is() -> None:
    view = _running_in("local-a")
    restart = E.IncidentRecorded(
        kind="runtime_lost", from_region="local-a", to_region="local-a", failed_at=1, detected_at=2
    )
    assert _notes(restart, view) is None
    for kind in ("worker_lost", "controller_lost"):
        recorded = E.IncidentRecorded(
            kind=kind, from_region="local-a", to_region="local-a", failed_at=1, detected_at=2, rto_s=3.5
        )
        note = _notes(recorded, view)
        assert note is not None
        assert (note["kind"], note["regions"], note["failure"], note["rto_s"]) == ("incident", ["local-a"], kind, 3.5)
        assert note["reason"]


def test_the_runs_end_is_succeeded_or_failed_with_the_verdicts_reason() -> None:
    done = _running_in("local-b", 2, E.Transition(RunState.SUCCEEDED, RunState.RUNNING, region="local-b"))
    note = _notes(E.RunFinished(status="SUCCEEDED", final_step=300), done)
    assert note is not None
    assert (note["kind"], note["status"], note["regions"], note["step"], note["reason"]) == (
        "succeeded",
        "SUCCEEDED",
        ["local-b"],
        300,
        None,
    )
    why = "recovery.max_failovers=2 spent"
    lost = _running_in("local-c", 3, E.Transition(RunState.FAILED, RunState.RUNNING, reason=why, region="local-c"))
    note = _notes(E.RunFinished(status="FAILED", final_step=120), lost)
    assert note is not None
    assert (note["kind"], note["status"], note["regions"], note["reason"]) == ("failed", "FAILED", ["local-c"], why)
    # Interrupted before any attempt: no region to name.
    early = fold([E.RunStarted(run_id=RUN), E.Transition(RunState.FAILED, RunState.PENDING, reason="interrupted")])
    assert _notes(E.RunFinished(status="FAILED", final_step=0), early)["regions"] == []  # type: ignore[index]


def test_no_other_event_makes_a_notification() -> None:
    view = _running_in("a")
    makes = {E.type_of(e) for e in SAMPLES if _notes(e, view) is not None}
    assert makes == {"failure_detected", "provision_failed", "incident", "run_finished"}
    assert _notes(E.DecisionMade(Action.FAILOVER, FailureKind.CLUSTER_LOST, region="b"), view) is None
    assert _notes(E.NotifyFailed("webhook", "incident", "HTTP 500"), view) is None


# --- delivery to a real server and a real command --------------------------------------------------


# --- whole runs ---------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "POLL_S", 0.002)
    monkeypatch.setattr(watch, "HEALTH_SETTLE_S", 0.01)


def _config_read_back(home: Path) -> Any:
    """The run's config as action=resume reads it: config.json, through config_from_plain."""
    from orchestrator.config.saved import config_from_plain

    return config_from_plain(json.loads((home / "runs" / RUN / "config.json").read_text()))


def test_a_config_json_from_before_notifications_resumes_with_none(tmp_path: Path) -> None:
    from orchestrator.control.controller import save_config

    home = tmp_path / "home"
    cfg = compose([f"home={home}", f"run_id={RUN}", "progress=false"])
    first = build_controller(cfg, FakeCloud({}), RUN, out=io.StringIO())  # type: ignore[arg-type]
    save_config(first.run_dir, cfg)
    path = home / "runs" / RUN / "config.json"
    saved = json.loads(path.read_text())
    del saved["notify"]
    path.write_text(json.dumps(saved))
    ctl = build_controller(_config_read_back(home), FakeCloud({}), RUN, out=io.StringIO())  # type: ignore[arg-type]
    assert (ctl.notify.command, ctl.notify.webhook, ctl.notify_lost) == (None, None, [])
    assert not (home / "runs" / RUN / NOTIFY_SECRET).exists()


def test_a_controller_given_env_varname_unset_is_refused_by_key_and_name(tmp_path: Path) -> None:
    from orchestrator.errors import ConfigError

    cfg = compose([f"home={tmp_path}", f"run_id={RUN}", "notify.webhook=env:ORCH_TEST_NO_SUCH_HOOK"])
    with pytest.raises(ConfigError) as err:
        build_controller(cfg, FakeCloud({}), RUN, out=io.StringIO())  # type: ignore[arg-type]
    assert err.value.key == "notify.webhook" and "ORCH_TEST_NO_SUCH_HOOK is not set" in str(err.value)


# --- notify.secret, file by file -------------------------------------------------------------------
