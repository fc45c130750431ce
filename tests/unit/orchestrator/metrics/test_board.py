"""TensorBoard files, checked offline: the records read back with tensorboardX's own proto
classes (byte for byte what tensorboardX writes), what each source of the run's numbers
becomes, which points reach the file after a restart, a writer that fails or stalls never
holding the run up, and a controller's run through a failover as TensorBoard shows it."""

from __future__ import annotations

import io
import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import orchestrator.control.watch as watch
import orchestrator.metrics.board as metrics
from orchestrator.config.compose import compose
from orchestrator.control.wiring import build_controller
from orchestrator.metrics import tbfile
from orchestrator.metrics.board import (
    LOSS,
    Curves,
    NoMetrics,
    Restart,
    Scalar,
    TensorBoardWriter,
    Text,
    event_records,
    final_records,
    goodput_records,
    loss_records,
    progress_records,
    tensorboard_writer,
)
from orchestrator.runstate import events as E
from orchestrator.runstate.goodput import CATEGORIES, goodput_of, journal_goodput
from orchestrator.runstate.journal import read_typed
from orchestrator.runstate.losses import append_loss, last_loss_step
from orchestrator.runstate.state import RunView, fold
from tests.support.fakecloud import HEARTBEATS, FakeCloud, Script
from tests.support.tbread import event_files, events, shown
from tests.unit.orchestrator.runstate.test_events import INCIDENT

pytestmark = pytest.mark.unit


# --- the file format -----------------------------------------------------------------------


def test_the_crc_is_castagnolis_and_the_frame_is_tfrecords() -> None:
    from tensorboardX.record_writer import masked_crc32c

    assert tbfile.crc32c(b"123456789") == 0xE3069283
    for data in (b"", b"x", bytes(range(256)) * 3):
        assert tbfile.masked_crc32c(data) == masked_crc32c(data)
    framed = tbfile.tf_record(b"abc")
    assert framed[:8] == (3).to_bytes(8, "little") and framed[12:15] == b"abc" and len(framed) == 19


def test_each_record_is_byte_for_byte_what_tensorboardx_writes() -> None:
    from tensorboardX.proto.event_pb2 import Event as TbEvent
    from tensorboardX.proto.event_pb2 import SessionLog
    from tensorboardX.summary import scalar, text

    assert (
        tbfile.scalar_event("train/loss", 0.25, 300, 12.5)
        == TbEvent(wall_time=12.5, step=300, summary=scalar("train/loss", 0.25)).SerializeToString()
    )
    # tensorboardX's text() suffixes the tag; the message is the same.
    assert (
        tbfile.text_event("incidents/text_summary", "| a | b |", 7, 1.5)
        == TbEvent(wall_time=1.5, step=7, summary=text("incidents", "| a | b |")).SerializeToString()
    )
    assert (
        tbfile.restart_event(51, 2.0)
        == TbEvent(wall_time=2.0, step=51, session_log=SessionLog(status=SessionLog.START)).SerializeToString()
    )
    assert tbfile.version_event(3.0) == TbEvent(wall_time=3.0, file_version="brain.Event:2").SerializeToString()


def test_a_scalar_beyond_float32_is_infinite_and_nan_stays_nan() -> None:
    from tensorboardX.proto.event_pb2 import Event as TbEvent

    for value, check in ((1e300, math.isinf), (-1e300, math.isinf), (float("nan"), math.isnan)):
        event = TbEvent()
        event.ParseFromString(tbfile.scalar_event("t", value, 1, 0.0))
        assert check(event.summary.value[0].simple_value)


def test_an_event_file_is_private_and_named_for_tensorboard(tmp_path: Path) -> None:
    f = tbfile.EventFile(str(tmp_path / "tb"), 1_700_000_000.5)
    f.write(tbfile.scalar_event("a", 1.0, 1, 1.0))
    f.close()
    (path,) = event_files(tmp_path / "tb")
    assert path.name.startswith("events.out.tfevents.1700000000.")
    assert path.stat().st_mode & 0o777 == 0o600 and (tmp_path / "tb").stat().st_mode & 0o777 == 0o700
    assert [e.summary.value[0].tag for e in events(tmp_path / "tb")[1:]] == ["a"]


# --- what each source becomes ------------------------------------------------------------------


def test_the_loss_series_keeps_a_diverged_loss_and_drops_what_is_no_point() -> None:
    records = loss_records([[5, 0.5], [10, float("nan")], ["x", 1.0], [15], [-1, 2.0], [20, True]])
    assert isinstance(records[0], Scalar) and records[0].value == 0.5
    assert [r.step for r in records] == [5, 10] and all(r.tag == LOSS for r in records)


def test_a_progress_report_becomes_rate_telemetry_metrics_and_search() -> None:
    worker = {"cpu_percent": 50.0, "peak_rss_bytes": 100, "net_bytes_sent": 3, "net_bytes_recv": 4}
    prog = {
        "step": 40,
        "time": 9.0,
        "steps_per_s": 12.5,
        "loss": 0.3,
        "telemetry": {
            "workers": [{**worker, "samples_per_s": 10.0}, {**worker, "cpu_percent": 100.0, "peak_rss_bytes": 300}],
            "gpu": [{"index": 0, "utilization_mean_percent": 80.0, "memory_peak_bytes": 5}],
        },
        "metrics": {"val acc": 0.9, "note": "text", "flag": True},
        "trials": {"running": 2, "terminated": 1},
        "best": {"metric": "accuracy", "value": 0.8, "trial_id": "t1"},
    }
    got = {r.tag: r.value for r in progress_records(prog) if isinstance(r, Scalar) and r.step == 40}
    assert got == {
        "train/steps_per_s": 12.5,
        "telemetry/cpu_percent": 75.0,
        "telemetry/peak_rss_bytes": 300.0,
        "telemetry/net_bytes_sent": 6.0,
        "telemetry/net_bytes_recv": 8.0,
        "telemetry/samples_per_s": 10.0,
        "telemetry/gpu0_utilization_percent": 80.0,
        "telemetry/gpu0_memory_peak_bytes": 5.0,
        "metrics/val_acc": 0.9,
        "search/trials_running": 2.0,
        "search/trials_terminated": 1.0,
        "search/best_accuracy": 0.8,
    }
    # What the wire lets through but is no number (or no step) is left out, never an error.
    assert progress_records({"step": "x", "steps_per_s": 1.0}) == []
    assert progress_records({"step": 3, "telemetry": {"workers": "all"}, "metrics": [1]}) == []


def test_the_final_metrics_are_at_the_final_step() -> None:
    assert final_records({"final_step": 500, "metrics": {"accuracy": 0.97, "eval_loss": 0.1, "n": None}}) == [
        Scalar("final/accuracy", 500, 0.97),
        Scalar("final/eval_loss", 500, 0.1),
    ]
    assert final_records({"final_step": 500}) == []


def _view(*events: E.Event) -> RunView:
    return fold(events)


def test_an_attempt_restored_from_a_step_restarts_the_curve_after_it_and_a_zombie_does_not() -> None:
    started = E.RuntimeReport("train_started", {"restored_step": 40, "generation": 2, "by": "runtime"})
    assert event_records(started, RunView()) == [Restart(41)]
    zombie = E.RuntimeReport("train_started", {"restored_step": 0, "generation": 1, "by": "zombie"})
    assert event_records(zombie, RunView()) == []
    lag = E.RuntimeReport("replicated", {"step": 40, "lag_s": 0.5, "by": "runtime"})
    assert event_records(lag, RunView()) == [Scalar("replication/lag_s", 40, 0.5)]
    assert event_records(E.Replicated(step=60, lag_s=0.25), RunView()) == [Scalar("replication/lag_s", 60, 0.25)]


def test_an_incident_is_a_marker_at_the_restored_step_with_every_incident_so_far() -> None:
    first = E.IncidentRecorded(**INCIDENT)
    opened = E.IncidentOpened(
        **{**INCIDENT, "failed_at": 200.0, "last_step": 75, "restored_step": None, "lost_steps": None, "rto_s": None}
    )
    view = _view(first, opened)
    (table,) = event_records(opened, view)
    assert isinstance(table, Text) and table.step == 75
    assert "| 1 | cluster_lost | local-a | local-b | 60 | 50 | 10 | 0.50 s | 15.00 s |" in table.text
    assert "| 2 | cluster_lost | local-a | local-b | 75 | - | - | 0.50 s | recovering |" in table.text
    second = E.IncidentRecorded(**{**INCIDENT, "failed_at": 200.0, "last_step": 75, "restored_step": 70, "rto_s": 9.0})
    view = _view(first, opened, second, second)  # recorded twice: one incident
    records = event_records(second, view)
    assert Scalar("incidents/count", 70, 2.0) in records and Scalar("incidents/rto_s", 70, 9.0) in records
    assert Scalar("incidents/lost_steps", 70, 10.0) in records
    (table,) = [r for r in records if isinstance(r, Text)]
    assert table.text.count("cluster_lost") == 2 and "recovering" not in table.text
    # Given up on: no restore, marked at the last step done.
    gave_up = E.IncidentRecorded(**{**INCIDENT, "restored_step": None, "rto_s": None, "lost_steps": None})
    assert Scalar("incidents/count", 60, 1.0) in event_records(gave_up, _view(gave_up))


def test_the_runs_end_is_a_line_of_text_with_the_reason_of_a_failure() -> None:
    view = _view(E.Transition(E.RunState.FAILED, reason="no region left"))
    (line,) = event_records(E.RunFinished(status="FAILED", final_step=30), view)
    assert line == Text("run", 30, "**FAILED** at step 30: no region left")


# --- which points reach the file ----------------------------------------------------------------


def test_a_point_behind_its_tags_last_is_left_out_unless_a_restart_came_first() -> None:
    curves = Curves()
    assert all(curves.admit(Scalar(LOSS, s, 1.0)) for s in (5, 10, 15))
    assert not curves.admit(Scalar(LOSS, 10, 2.0))  # a late report of an older step
    assert curves.admit(Scalar(LOSS, 15, 2.0))  # the same step again: TensorBoard keeps the last
    assert curves.admit(Scalar("other", 1, 0.0))  # each tag its own
    assert curves.admit(Restart(11))  # restored from step 10
    assert curves.last == {LOSS: 10, "other": 1}
    assert curves.admit(Scalar(LOSS, 15, 3.0)) and not curves.admit(Scalar(LOSS, 5, 3.0))
    seeded = Curves({LOSS: 16})  # a resumed controller: the series reached 15 before it
    assert not seeded.admit(Scalar(LOSS, 15, 1.0)) and seeded.admit(Scalar(LOSS, 20, 1.0))


def _written(tmp_path: Path, feed: Any, **kwargs: Any) -> list[str]:
    failures: list[str] = []
    writer = TensorBoardWriter(str(tmp_path / "tb"), failures.append, **kwargs)
    feed(writer)
    writer.close()
    return failures


def test_a_restart_from_an_older_step_shows_the_last_written_curve_without_a_zigzag(tmp_path: Path) -> None:
    def feed(w: TensorBoardWriter) -> None:
        w.event(E.RuntimeReport("train_started", {"restored_step": 0, "by": "runtime"}, ts=1.0), RunView())
        w.losses([[s, 1.0 + 1 / s] for s in range(5, 65, 5)], at=2.0)
        w.event(E.RuntimeReport("train_started", {"restored_step": 40, "by": "runtime"}, ts=3.0), RunView())
        inc = E.IncidentRecorded(**{**INCIDENT, "restored_step": 40}, ts=4.0)
        w.event(inc, _view(inc))
        w.losses([[s, 2.0 + 1 / s] for s in range(45, 105, 5)], at=5.0)
        w.progress({"step": 100, "time": 6.0, "steps_per_s": 9.0})
        w.final({"final_step": 100, "time": 7.0, "metrics": {"accuracy": 0.9}})

    assert _written(tmp_path, feed) == []
    tb = shown(tmp_path / "tb")
    assert tb.restarts == [1, 41]
    loss = tb.scalars[LOSS]
    assert [s for s, _ in loss] == list(range(5, 105, 5))
    assert all(v < 2 for s, v in loss if s <= 40) and all(v > 2 for s, v in loss if s > 40)
    assert tb.scalars["incidents/count"] == [(40, 1.0)]
    assert tb.scalars["final/accuracy"] == [(100, pytest.approx(0.9))]
    assert tb.scalars["train/steps_per_s"] == [(100, 9.0)]
    assert tb.texts["incidents"][0][0] == 40


def test_a_resumed_controller_does_not_write_its_adopted_attempts_points_twice(tmp_path: Path) -> None:
    for s in range(5, 35, 5):
        append_loss(str(tmp_path), generation=1, region="a", step=s, loss=1.0)
    assert last_loss_step(str(tmp_path)) == 30 and last_loss_step(str(tmp_path / "none")) is None
    writer = tensorboard_writer(str(tmp_path), lambda e: None)
    writer.losses([[s, 1.0] for s in range(5, 45, 5)], at=1.0)  # the attempt's series, read again
    writer.close()
    assert shown(tmp_path / "tensorboard").steps(LOSS) == [35, 40]
    (tmp_path / "damaged" / "loss.jsonl").mkdir(parents=True)  # unreadable: the series starts afresh
    assert tensorboard_writer(str(tmp_path / "damaged"), lambda e: None)._curves.last == {}


def test_a_writer_that_cannot_write_says_so_once_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "tb").write_text("a file where the folder goes")

    def feed(w: TensorBoardWriter) -> None:
        for s in range(1, 50):
            w.losses([[s, 1.0]], at=1.0)

    started = time.monotonic()
    failures = _written(tmp_path, feed)
    # Bounded on a busy 2-core machine too: far from what retrying every write would take.
    assert time.monotonic() - started < 5
    assert len(failures) == 1 and failures[0].startswith("stopped: FileExistsError") and "\n" not in failures[0]


def test_a_stuck_disk_never_holds_the_run_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "QUEUE_MAX", 4)
    release = threading.Event()
    monkeypatch.setattr(tbfile.EventFile, "flush", lambda self: release.wait(10))
    failures: list[str] = []
    writer = TensorBoardWriter(str(tmp_path / "tb"), failures.append, close_s=0.3)
    started = time.monotonic()
    for s in range(1, 200):
        writer.losses([[s, 1.0]], at=1.0)
        writer.event(E.Replicated(step=s, lag_s=0.1), RunView())
    writer.close()
    # The stuck flush alone would hold it 10 s; a busy machine may take a few seconds.
    assert time.monotonic() - started < 5
    release.set()
    assert len(failures) == 1 and "not written within 0.3 s" in failures[0]


# --- the controller's run ----------------------------------------------------------------------


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "POLL_S", 0.002)
    monkeypatch.setattr(watch, "HEALTH_SETTLE_S", 0.01)


def _config(home: Path) -> Any:
    return compose(
        [
            f"home={home}",
            "run_id=tb",
            "progress=false",
            "job.steps=60",
            *HEARTBEATS,
        ]
    )


def test_a_failover_run_as_tensorboard_shows_it(tmp_path: Path, fast: None) -> None:
    ctl = build_controller(
        _config(tmp_path), FakeCloud({"local-a": [Script(50, "cluster_lost")]}), "tb", out=io.StringIO()
    )  # type: ignore[arg-type]
    result = ctl.run()
    assert result["status"] == "SUCCEEDED"
    tb = shown(Path(ctl.run_dir) / "tensorboard")
    (inc,) = ctl.record.incidents
    restored = inc.restored_step
    assert restored is not None
    # Generation 1 trained to 50; the next went on from the step it restored, along the same curve.
    loss = tb.scalars[LOSS]
    assert [s for s, _ in loss] == [10, 20, 30, 40, 50, 60]
    assert all(int(v) == 1 for s, v in loss if s <= restored) and all(int(v) > 1 for s, v in loss if s > restored)
    assert tb.restarts == [1, restored + 1]
    assert tb.scalars["incidents/count"] == [(restored, 1.0)]
    assert "cluster_lost | local-a | local-b" in tb.texts["incidents"][-1][1]
    assert tb.texts["run"] == [(60, "**SUCCEEDED** at step 60")]
    assert tb.scalars["final/loss"] == [(60, pytest.approx(1 / 60))]
    # Where its time went, at its last step: the journal's goodput up to run_finished (result.json's
    # runs on to the moment it is written, a share of a 0.1 s run that a loaded machine moves).
    share = tb.scalars["goodput/share"]
    typed = list(read_typed(ctl.journal.path))
    (end,) = [i for i, e in enumerate(typed) if isinstance(e, E.RunFinished)]
    at_end = journal_goodput(typed[: end + 1], now=typed[end].ts)
    assert [s for s, _ in share] == [60] and share[0][1] == pytest.approx(at_end.goodput, rel=1e-6)
    productive = result["goodput"]["seconds"]["productive"]
    assert tb.scalars["goodput/productive_s"][0][1] == pytest.approx(productive, abs=2e-3)
    parts = sum(tb.scalars[f"goodput/{c}_s"][0][1] for c in CATEGORIES)
    assert parts == pytest.approx(tb.scalars["goodput/productive_s"][0][1] / share[0][1], rel=1e-3)
    assert not [e for e in ctl.journal.events() if e["type"] == "tensorboard_failed"]


def test_the_runs_goodput_is_its_share_its_categories_and_its_cost_at_the_last_step() -> None:
    from providers.prices import NodePrice
    from tests.unit.orchestrator.runstate.test_goodput import two_attempts

    g = goodput_of(two_attempts(), {"local-a": NodePrice(1.0, "t"), "local-b": NodePrice(1.0, "t")}, {}, 278.0)
    records = {r.tag: r for r in goodput_records(g, 300) if isinstance(r, Scalar)}
    assert records["goodput/share"] == Scalar("goodput/share", 300, pytest.approx(g.goodput))
    assert sum(records[f"goodput/{c}_s"].value for c in CATEGORIES) == pytest.approx(278.0)
    assert records["cost/usd"].value == pytest.approx(g.cost_usd)
    assert records["cost/node_hours/local-a"].value == pytest.approx(134.0 / 3600)
    unpriced = goodput_of(two_attempts(), {}, {}, 278.0)
    assert "cost/usd" not in {r.tag for r in goodput_records(unpriced, 300)}


def test_tensorboard_off_writes_nothing_and_a_failing_one_is_journaled_once(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    cfg.metrics.tensorboard = False
    assert isinstance(build_controller(cfg, FakeCloud({}), "off", out=io.StringIO()).metrics, NoMetrics)  # type: ignore[arg-type]
    cfg.metrics.tensorboard = True
    blocked = tmp_path / "runs" / "tb"
    blocked.mkdir(parents=True)
    (blocked / "tensorboard").write_text("not a folder")
    ctl = build_controller(cfg, FakeCloud({}), "tb", out=io.StringIO())  # type: ignore[arg-type]
    for n in range(3):
        ctl.emit(E.RunFinished(status="SUCCEEDED", final_step=n))
    ctl.metrics.close()
    (failed,) = [e for e in ctl.journal.events() if e["type"] == "tensorboard_failed"]
    assert failed["error"].startswith("stopped: FileExistsError")
    assert not (tmp_path / "runs" / "off" / "tensorboard").exists()


def _trial(trial_id: Any, iteration: Any, metrics: Any, by: str = "runtime") -> E.RuntimeReport:
    fields = {"trial_id": trial_id, "iteration": iteration, "metrics": metrics, "generation": 1, "by": by}
    return E.RuntimeReport("trial_result", fields, ts=1.0)


def test_a_trials_iteration_is_its_metrics_in_a_run_of_its_own() -> None:
    got = event_records(_trial("trial_00003", 2, {"accuracy": 0.5, "loss calls": 4, "x": "no"}), RunView())
    assert got == [
        Scalar("search/accuracy", 2, 0.5, run="trials/trial_00003"),
        Scalar("search/loss_calls", 2, 4.0, run="trials/trial_00003"),
    ]
    # The id names a folder: anything but a trial's id is no record.
    for bad in ("../../etc", "trial_3", "trial_00003/..", None):
        assert event_records(_trial(bad, 2, {"accuracy": 0.5}), RunView()) == []
    assert event_records(_trial("trial_00003", -1, {"accuracy": 0.5}), RunView()) == []
    assert event_records(_trial("trial_00003", 2, {"accuracy": 0.5}, by="zombie"), RunView()) == []


def test_each_trial_is_a_tensorboard_run_beside_the_runs_own_curves(tmp_path: Path) -> None:
    def feed(w: TensorBoardWriter) -> None:
        w.progress({"step": 3, "time": 1.0, "trials": {"running": 2}})
        for it in (1, 2, 3):
            w.event(_trial("trial_00000", it, {"accuracy": 0.1 * it}), RunView())
        w.event(_trial("trial_00001", 1, {"accuracy": 0.7}), RunView())
        # A trial resumed from its checkpoint at 2 reports 3 again, and the same curve goes on.
        w.event(_trial("trial_00000", 3, {"accuracy": 0.3}), RunView())
        w.event(_trial("trial_00000", 4, {"accuracy": 0.4}), RunView())

    assert _written(tmp_path, feed) == []
    assert shown(tmp_path / "tb").scalars["search/trials_running"] == [(3, 2.0)]
    first = shown(tmp_path / "tb" / "trials" / "trial_00000").scalars["search/accuracy"]
    assert [(s, round(v, 6)) for s, v in first] == [(1, 0.1), (2, 0.2), (3, 0.3), (3, 0.3), (4, 0.4)]
    assert shown(tmp_path / "tb" / "trials" / "trial_00001").scalars["search/accuracy"] == [(1, pytest.approx(0.7))]
    assert "search/accuracy" not in shown(tmp_path / "tb").scalars
