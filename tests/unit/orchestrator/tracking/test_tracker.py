"""The tracker listener over a recording sink: what a run's reports and events become,
one tracker run taken up again from the journal, and a tracker that fails costing the
tracking alone (said once), never the run."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.compose import compose
from orchestrator.runstate import rundir
from orchestrator.runstate.events import (
    AttemptStarted,
    Event,
    IncidentRecorded,
    RunFinished,
    RuntimeReport,
    TrackingStarted,
)
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.state import RunView
from orchestrator.tracking.series import Point
from orchestrator.tracking.sinks import Started
from orchestrator.tracking.tracker import Tracker, journaled_runs

pytestmark = pytest.mark.unit


class Recording:
    """A tracker that keeps what it is given."""

    def __init__(self, written: dict[str, int] | None = None, fail: bool = False) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.points: dict[str, list[Point]] = {}
        self._written = written or {}
        self.fail = fail

    def start(self, known: str | None, params: Mapping[str, str], tags: Mapping[str, str]) -> Started:
        if self.fail:
            raise ConnectionError("http://127.0.0.1:1: connection refused")
        self.calls.append(("start", (known, dict(tags))))
        return Started(known or "new-run", known is not None)

    def child(self, trial: str, known: str | None, params: Mapping[str, str]) -> Started:
        self.calls.append(("child", (trial, dict(params))))
        return Started(known or f"child-{trial}", known is not None)

    def written(self, child: str) -> dict[str, int]:
        return dict(self._written)

    def metrics(self, child: str, points: Sequence[Point]) -> None:
        self.points.setdefault(child, []).extend(points)

    def tags(self, tags: Mapping[str, str]) -> None:
        self.calls.append(("tags", dict(tags)))

    def incident(self, number: int, record: Mapping[str, Any], line: str) -> None:
        self.calls.append(("incident", (number, line)))

    def checkpoint(self, url: str, step: int | None, sha256: str | None) -> None:
        self.calls.append(("checkpoint", url))

    def finish(self, status: str) -> None:
        self.calls.append(("finish", status))


def runtime(kind: str, **fields: Any) -> RuntimeReport:
    return RuntimeReport(kind=kind, fields={**fields, "by": "runtime"})


def make(tmp_path: Path, sink: Recording) -> tuple[Tracker, list[Event], list[str]]:
    cfg = compose(["job=digits", "tracking=mlflow", "tracking.uri=http://127.0.0.1:5000", "tracking.flush_every_s=0.1"])
    emitted: list[Event] = []
    failed: list[str] = []
    tracker = Tracker(cfg, "r1", str(tmp_path), emit=emitted.append, failed=failed.append, make=lambda *a: sink)
    return tracker, emitted, failed


def tell(tracker: Tracker, *events: Event) -> None:
    for e in events:
        tracker.on_event(e, RunView())


def test_a_run_with_a_failover_is_one_tracker_run_one_series_its_incident_and_its_end(tmp_path: Path) -> None:
    (tmp_path / rundir.RESULT_NAME).write_text(
        json.dumps({"status": "SUCCEEDED", "final_step": 30, "final_checkpoint": "file:///ckpt/r1/step_30"})
    )
    sink = Recording()
    tracker, emitted, failed = make(tmp_path, sink)
    tell(tracker, AttemptStarted(generation=1, region="a"), runtime("train_started"))
    tracker.losses([[s, 1.0] for s in range(1, 16)], 1.0)
    tell(tracker, runtime("checkpoint_committed", step=10))
    incident = IncidentRecorded(kind="kill_region", from_region="a", failed_at=5.0, detected_at=6.0, to_region="b")
    tell(tracker, incident, AttemptStarted(generation=2, region="b"), runtime("train_started", restored_step=10))
    tracker.losses([[s, 2.0] for s in range(11, 31)], 2.0)
    tell(tracker, runtime("checkpoint_committed", step=30), RunFinished(status="SUCCEEDED", final_step=30))
    tracker.close()
    assert failed == []
    losses = [(p.step, p.value) for p in sink.points[""] if p.key == "train/loss"]
    assert [s for s, _ in losses] == list(range(1, 31))
    assert dict(losses)[12] == 2.0  # the retrained value; 11..15 of the lost attempt never went
    assert [e for e in emitted if isinstance(e, TrackingStarted)] == [
        TrackingStarted(kind="mlflow", tracker_run="new-run", resumed=False)
    ]
    tags: dict[str, str] = {}
    for name, value in sink.calls:
        if name == "tags":
            tags.update(value)
    assert tags["orchestrator.regions"] == "a,b" and tags["orchestrator.status"] == "SUCCEEDED"
    assert ("incident", (1, "kill_region: a -> b")) in sink.calls
    assert ("checkpoint", "file:///ckpt/r1/step_30") in sink.calls
    assert sink.calls[-1] == ("finish", "FINISHED")
    kept = json.loads((tmp_path / "tracking" / "written.json").read_text())
    assert kept[""]["train/loss"] == 30


def test_a_resumed_controller_takes_the_journaled_run_up_again_and_gives_no_step_twice(tmp_path: Path) -> None:
    journal = Journal(rundir.journal_path(str(tmp_path)))
    journal.emit(TrackingStarted(kind="mlflow", tracker_run="abc123"))
    journal.emit(TrackingStarted(kind="mlflow", tracker_run="t1", trial="trial_00001"))
    assert journaled_runs(rundir.journal_path(str(tmp_path)), "mlflow") == {"": "abc123", "trial_00001": "t1"}
    sink = Recording(written={"train/loss": 20})
    tracker, emitted, _ = make(tmp_path, sink)
    tracker.losses([[s, 1.0] for s in range(1, 26)], 1.0)  # an adopted attempt's series from its start
    tell(tracker, RunFinished(status="SUCCEEDED", final_step=25))
    tracker.close()
    assert sink.calls[0] == ("start", ("abc123", {"orchestrator.run_id": "r1", "orchestrator.job": "digits"}))
    assert [p.step for p in sink.points[""]] == [21, 22, 23, 24, 25]
    assert TrackingStarted(kind="mlflow", tracker_run="abc123", resumed=True) in emitted


def test_a_search_s_trials_are_child_runs_with_their_own_iterations(tmp_path: Path) -> None:
    sink = Recording()
    tracker, emitted, _ = make(tmp_path, sink)
    tell(
        tracker,
        runtime("trial_started", trial_id="trial_00001", config={"lr": 0.1}),
        runtime("trial_result", trial_id="trial_00001", iteration=1, metrics={"accuracy": 0.5}),
        runtime("trial_result", trial_id="trial_00001", iteration=2, metrics={"accuracy": 0.6}),
        runtime("trial_checkpointed", trial_id="trial_00001", iteration=1),
        runtime("trial_restored", trial_id="trial_00001", iteration=1),
        runtime("trial_result", trial_id="trial_00001", iteration=2, metrics={"accuracy": 0.7}),
        RunFinished(status="SUCCEEDED", final_step=2),
    )
    tracker.close()
    assert ("child", ("trial_00001", {"lr": "0.1"})) in sink.calls
    got = [(p.key, p.step, p.value) for p in sink.points["trial_00001"]]
    assert got == [("accuracy", 1, 0.5), ("accuracy", 2, 0.7)]
    assert any(isinstance(e, TrackingStarted) and e.trial == "trial_00001" for e in emitted)


def test_an_unreachable_tracker_is_said_once_and_the_listener_never_raises(tmp_path: Path) -> None:
    sink = Recording(fail=True)
    tracker, emitted, failed = make(tmp_path, sink)
    tracker.losses([[1, 1.0]], 1.0)
    tell(tracker, runtime("checkpoint_committed", step=1), RunFinished(status="SUCCEEDED", final_step=1))
    tracker.close()
    tracker.losses([[2, 1.0]], 1.0)  # after close: nothing, no error
    assert len(failed) == 1 and failed[0].startswith("ConnectionError: http://127.0.0.1:1")
    assert emitted == []


def test_a_zombie_s_word_is_no_part_of_the_curves(tmp_path: Path) -> None:
    sink = Recording()
    tracker, _, _ = make(tmp_path, sink)
    tracker.losses([[s, 1.0] for s in range(1, 6)], 1.0)
    tell(tracker, RuntimeReport(kind="checkpoint_committed", fields={"step": 5, "by": "zombie"}))
    tell(tracker, runtime("train_started", restored_step=2), RunFinished(status="FAILED", final_step=2))
    tracker.close()
    assert [p.step for p in sink.points[""]] == [1, 2]
    assert sink.calls[-1] == ("finish", "FAILED")


def test_the_sdk_is_imported_early_on_a_thread_at_the_lowest_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import sys
    import threading

    from orchestrator.config.schema import TrackerKind
    from orchestrator.tracking import tracker

    assert tracker.preload(TrackerKind.none) is None
    seen: dict[str, int] = {}
    real = tracker.lowest_priority

    def lowest() -> None:
        real()
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    monkeypatch.setattr(tracker, "lowest_priority", lowest)
    monkeypatch.setitem(tracker.SDKS, TrackerKind.mlflow, "colorsys")
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    thread = tracker.preload(TrackerKind.mlflow)
    assert thread is not None
    thread.join(10)
    assert "colorsys" in sys.modules and seen["nice"] == 19
    # A missing SDK is the first batch's to say: the early import keeps quiet.
    monkeypatch.setitem(tracker.SDKS, TrackerKind.mlflow, "no_such_sdk_here")
    missing = tracker.preload(TrackerKind.mlflow)
    assert missing is not None
    missing.join(10)
    assert not missing.is_alive()
