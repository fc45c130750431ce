"""``action=list``: every run under home as one row, a view of its folded journal.

Run folders are made the way the controller makes them: journals written through
``Journal.emit`` with typed events, result.json through ``write_result``, the lock
taken with ``lock_controller``."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from orchestrator.__main__ import main
from orchestrator.commands.runs_list import (
    CONTROLLER_DIED,
    EMPTY,
    HEADER,
    UNREADABLE,
    RunRow,
    fmt_duration,
    fmt_started,
    fmt_step,
    list_runs,
    newest_first,
    no_runs,
    render_json,
    render_table,
    row_from,
    unreadable,
)
from orchestrator.commands.status import UNVERIFIED, live_progress, render, summarize
from orchestrator.runstate import events as E
from orchestrator.runstate.journal import DamagedFile, Journal, read_typed
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.result import read_result, record_from, write_result
from orchestrator.runstate.rundir import lock_controller
from orchestrator.runstate.runfiles import REMOVE
from orchestrator.runstate.state import RunView, fold
from orchestrator.wire.control import ControlChannel, run_control_url
from recovery.signing import load_or_create_secret
from tests.support.sealed import sealed_progress
from tests.unit.orchestrator.test_main import JOURNAL_DAMAGE, RESULT_DAMAGE

pytestmark = pytest.mark.unit
CONFIG = {"job": {"name": "digits", "steps": 500}, "cloud": {"name": "local"}}


def journal(run_dir: Path, *events: E.Event) -> Journal:
    """A journal as the controller writes one: each typed event through ``Journal.emit``."""
    j = Journal(str(run_dir / "journal.jsonl"))
    for event in events:
        j.emit(event)
    return j


def view_of(run_dir: Path) -> RunView:
    return fold(read_typed(str(run_dir / "journal.jsonl")))


# --- is its controller alive ------------------------------------------------------------------


# --- the live step (status and list read it alike) ---------------------------------------------


def test_the_live_step_comes_from_the_newest_attempts_control_channel(tmp_path: Path) -> None:
    run_dir = tmp_path / "r1"
    journal(run_dir, E.RunStarted(run_id="r1", config={"job": {"steps": 100}}))
    assert live_progress(str(run_dir), view_of(run_dir)) is None  # no attempt yet
    journal(run_dir, E.AttemptStarted(1, "local-a"), E.AttemptStarted(2, "local-b"))
    sealed_progress(run_dir, 1, step=80, total=100)
    sealed_progress(run_dir, 2, step=40, total=100)
    prog = live_progress(str(run_dir), view_of(run_dir))
    assert prog is not None and (prog["step"], prog["total"]) == (40, 100)


def test_a_live_progress_that_does_not_open_under_the_runs_keys_is_not_shown(tmp_path: Path) -> None:
    # Anyone who can write the control store could rewrite progress.json (2999/3000 45 s in).
    run_dir = tmp_path / "r1"
    journal(
        run_dir,
        E.RunStarted(run_id="r1", config={"job": {"steps": 3000}}),
        E.AttemptStarted(1, "local-a"),
        E.RuntimeReport(kind="checkpoint_committed", fields={"generation": 1, "step": 100}),
    )
    load_or_create_secret(str(run_dir))
    ControlChannel(run_control_url(None, "r1", str(run_dir))).progress(1, step=2999, total=3000)
    prog = live_progress(str(run_dir), view_of(run_dir))
    assert prog is not None and "not signed" in prog[UNVERIFIED]
    row = row_from("r1", view_of(run_dir), None, prog, True, 0.0)
    assert row.step != 2999 and "step from the journal" in row.reason
    s = summarize(str(run_dir))
    assert s is not None and s["step"] != 2999 and "not signed" in s["unverified"]
    assert "not shown" in render("r1", s) and "2999" not in render("r1", s)


def test_a_control_store_the_journal_names_wrongly_is_no_live_step_not_a_crash(tmp_path: Path) -> None:
    # The journal's copy of the config is for display; an edited one once crashed action=status.
    run_dir = tmp_path / "r1"
    journal(run_dir, E.RunStarted(run_id="r1", config={"cloud": {"control_store": 5}}), E.AttemptStarted(1, "a"))
    assert live_progress(str(run_dir), view_of(run_dir)) is None
    s = summarize(str(run_dir))
    assert s is not None and s["step"] is None


# --- the command line -----------------------------------------------------------------------


def test_action_list_needs_no_run_id_and_takes_a_format(tmp_path: Path) -> None:
    from orchestrator.config.compose import compose
    from orchestrator.config.schema import Action, OutputFormat

    cfg = compose(["action=list", f"home={tmp_path}"])
    assert (cfg.action, cfg.format, cfg.run_id) == (Action.list, OutputFormat.table, None)
    assert compose(["action=list", "format=json", f"home={tmp_path}"]).format is OutputFormat.json


def test_a_config_json_from_before_format_existed_still_resumes(tmp_path: Path) -> None:
    import json

    from orchestrator.config.compose import compose
    from orchestrator.config.saved import config_from_plain
    from orchestrator.config.schema import OutputFormat
    from orchestrator.wire.codec import to_plain

    saved = to_plain(compose(["run_id=r1", f"home={tmp_path}"]))
    del saved["format"]
    assert config_from_plain(json.loads(json.dumps(saved))).format is OutputFormat.table


# --- a row from a run's view (pure) -----------------------------------------------------------

T0 = 1_780_000_000.0


def up_to_running(run_id: str = "r1", t: float = T0) -> list[E.Event]:
    """A run's first events, as the controller journals them, at times from ``t``."""
    return [
        E.RunStarted(run_id=run_id, pid=1, config=CONFIG, ts=t),
        E.Transition(RunState.PROVISIONING, RunState.PENDING, ts=t + 1),
        E.AttemptStarted(1, "local-a", ts=t + 2),
        E.Transition(RunState.RUNNING, RunState.PROVISIONING, ts=t + 10),
    ]


INCIDENT: dict[str, Any] = {
    "kind": "cluster_lost",
    "from_region": "local-a",
    "failed_at": T0 + 30,
    "detected_at": T0 + 31,
    "to_region": "local-b",
    "generation": 1,
    "last_step": 60,
    "restored_step": 50,
    "lost_steps": 10,
    "rto_s": 14.0,
}


def result_of(status: str, **fields: Any) -> dict[str, Any]:
    return {
        "status": status,
        "reason": "",
        "final_step": 500,
        "final_checkpoint": None,
        "metrics": {},
        "incidents": [],
        "attempts": 1,
        "duration_s": 61.5,
        **fields,
    }


def test_a_finished_run_is_what_its_result_says() -> None:
    view = fold([*up_to_running(), E.Transition(RunState.SUCCEEDED, RunState.RUNNING, ts=T0 + 60)])
    row = row_from("r1", view, result_of("SUCCEEDED"), None, False, now=T0 + 999)
    assert row == RunRow(
        run_id="r1",
        status="SUCCEEDED",
        job="digits",
        region="local-a",
        step=500,
        total=500,
        incidents=0,
        started_at=T0,
        duration_s=61.5,
    )


def test_a_failed_run_carries_its_reason_and_incidents() -> None:
    view = fold([*up_to_running(), E.IncidentRecorded(**INCIDENT, ts=T0 + 40)])
    result = result_of("FAILED", reason="no region left", final_step=60, incidents=[{"kind": "x", "from_region": "a"}])
    row = row_from("r1", view, result, None, False, now=T0 + 999)
    assert (row.status, row.step, row.incidents, row.reason) == ("FAILED", 60, 1, "no region left")


def test_a_run_with_a_live_controller_shows_its_state_live_step_and_time_so_far() -> None:
    view = fold([*up_to_running(), E.IncidentOpened(**INCIDENT, ts=T0 + 40)])
    row = row_from("r1", view, None, {"step": 240, "total": 500}, True, now=T0 + 125)
    assert (row.status, row.step, row.total, row.incidents) == ("RUNNING", 240, 500, 1)
    assert (row.duration_s, row.reason) == (125.0, "")


def test_a_run_whose_controller_died_says_so_and_how_to_go_on() -> None:
    view = fold(up_to_running())
    row = row_from("r1", view, None, None, False, now=T0 + 999)
    assert row.status == CONTROLLER_DIED
    assert row.reason == "its controller died; continue it with action=resume run_id=r1"
    assert row.duration_s == 10.0, "a dead run lasted until its last journaled event"


def test_a_journal_that_reached_a_verdict_without_a_result_is_not_finished() -> None:
    # result.json is what makes a run finished (as action=run and action=resume read it).
    view = fold([*up_to_running(), E.Transition(RunState.SUCCEEDED, RunState.RUNNING, ts=T0 + 60)])
    assert row_from("r1", view, None, None, False, now=T0).status == CONTROLLER_DIED
    assert row_from("r1", view, None, None, True, now=T0).status == "SUCCEEDED"


def test_without_a_live_step_the_journals_last_step_shows() -> None:
    view = fold([*up_to_running(), E.FailureDetected("cluster_lost", last_step=60, ts=T0 + 31)])
    assert row_from("r1", view, None, None, True, now=T0).step == 60


def test_a_folder_without_a_journal_is_empty_unless_a_controller_is_starting() -> None:
    assert row_from("r1", RunView(), None, None, False, now=T0).status == EMPTY
    assert row_from("r1", RunView(), None, None, True, now=T0).status == "PENDING"


def test_a_lock_that_cannot_be_probed_keeps_the_journals_state_and_says_why() -> None:
    row = row_from("r1", fold(up_to_running()), None, None, None, now=T0 + 20)
    assert row.status == "RUNNING" and "controller.lock" in row.reason


def test_an_unreadable_row_keeps_what_the_journal_said() -> None:
    assert unreadable("r1", "why") == RunRow(run_id="r1", status=UNREADABLE, reason="why")
    row = unreadable("r1", "result.json: is empty", 5.0, fold(up_to_running()))
    assert (row.job, row.region, row.started_at, row.step, row.seen_at) == ("digits", "local-a", T0, None, 5.0)


def test_a_damaged_config_in_the_journal_shows_as_unknown() -> None:
    view = fold([E.RunStarted(run_id="r1", config={"job": ["x"]}, ts=T0)])
    row = row_from("r1", view, None, None, True, now=T0)
    assert (row.job, row.total) == (None, None)


# --- order ------------------------------------------------------------------------------------


def test_newest_first_by_start_then_by_when_the_folder_changed() -> None:
    rows = [
        RunRow("old", "SUCCEEDED", started_at=T0),
        RunRow("new", "RUNNING", started_at=T0 + 100),
        RunRow("damaged-lately", UNREADABLE, seen_at=T0 + 50),
        RunRow("b", "FAILED", started_at=T0 + 10),
        RunRow("a", "FAILED", started_at=T0 + 10),
    ]
    assert [r.run_id for r in newest_first(rows)] == ["new", "damaged-lately", "b", "a", "old"]


# --- formatting (pure) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.2, "0s"),
        (59.4, "59s"),
        (61.5, "1m 02s"),
        (3599, "59m 59s"),
        (3600, "1h 00m"),
        (90061, "25h 01m"),
    ],
)
def test_durations_read_at_a_glance(seconds: float | None, text: str) -> None:
    assert fmt_duration(seconds) == text


def test_step_and_start_cells() -> None:
    assert (fmt_step(240, 500), fmt_step(None, 500), fmt_step(60, None), fmt_step(None, None)) == (
        "240/500",
        "-/500",
        "60",  # no total to count against: none is made up
        "-",
    )
    assert fmt_started(None) == "-"
    assert fmt_started(T0) == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(T0))


def test_the_table_lines_up_its_columns_and_puts_reasons_under_it() -> None:
    rows = [
        RunRow("run-2", "RUNNING", "digits", "local-b", 240, 500, 1, T0 + 100, 125.0, goodput=0.4815, cost_usd=0.0123),
        RunRow(
            "d1",
            CONTROLLER_DIED,
            "digits",
            "local-a",
            120,
            500,
            0,
            T0,
            10.0,
            reason="its controller died",
            unpriced=True,
        ),
    ]
    lines = render_table(rows).splitlines()
    assert lines[0].split() == ["RUN", "ID", *HEADER[1:]]
    starts = [lines[0].index(h) for h in HEADER]
    for line, row in zip(lines[1:3], rows, strict=True):
        cells = [row.run_id, row.job, row.status, row.region]
        assert [line.index(c) for c in cells] == starts[:4], line
    assert lines[1].split()[4:6] == ["240/500", "1"] and lines[1].split()[-4:] == ["2m", "05s", "48%", "$0.0123"]
    # A region without a price: the cost is not known, and says so apart from "no cost yet".
    assert lines[2].split()[-2:] == ["-", "?"]
    assert lines[3:] == ["", "d1: its controller died"]


def test_a_terminals_width_cuts_the_reasons_not_the_table() -> None:
    rows = [RunRow("r1", UNREADABLE, reason="journal.jsonl: " + "x" * 200)]
    lines = render_table(rows, width=40).splitlines()
    assert lines[-1] == ("r1: journal.jsonl: " + "x" * 200)[:39] + "…"
    assert lines[:2] == render_table(rows).splitlines()[:2]


def test_names_read_from_disk_cannot_drive_the_terminal() -> None:
    text = render_table([RunRow("r\x1b[2J1", UNREADABLE, job="a\nb", reason="bad\rline")])
    assert "\x1b" not in text and "\r" not in text
    assert len(text.splitlines()) == 4


def test_the_json_form_has_the_same_fields_as_flat_keys() -> None:
    rows = [RunRow("r1", "RUNNING", "digits", "local-a", 240, 500, 1, T0, 125.0, seen_at=T0)]
    assert json.loads(render_json(rows)) == [
        {
            "run_id": "r1",
            "status": "RUNNING",
            "job": "digits",
            "region": "local-a",
            "step": 240,
            "total": 500,
            "incidents": 1,
            "started_at": T0,
            "duration_s": 125.0,
            "reason": "",
            "goodput": None,
            "cost_usd": None,
            "unpriced": False,
        }
    ]
    assert json.loads(render_json([])) == []


def test_no_runs_says_where_it_looked_and_how_to_start_one() -> None:
    text = no_runs("/h")
    assert "\n" not in text and "/h" in text and "python -m orchestrator job=digits home=/h" in text


# --- reading a home ---------------------------------------------------------------------------


def finish(run_dir: Path, run_id: str, final: dict[str, Any] | None) -> dict[str, Any]:
    """The run's end as the controller writes it: result.json from the folded view, then run_finished."""
    view = view_of(run_dir)
    result = write_result(str(run_dir), record_from(view, run_id, final, view.started_at), {})
    journal(run_dir, E.RunFinished(status=result["status"], final_step=result["final_step"]))
    return result


def started(home: Path, run_id: str, *more: E.Event) -> Path:
    run_dir = home / "runs" / run_id
    journal(
        run_dir,
        E.RunStarted(run_id=run_id, pid=1, config=CONFIG),
        E.Transition(RunState.PROVISIONING, RunState.PENDING),
        E.AttemptStarted(1, "local-a"),
        E.Transition(RunState.RUNNING, RunState.PROVISIONING),
        *more,
    )
    return run_dir


# Oldest first; damaged folders are made last and dated back, so the order below is set.
KINDS = ["succeeded", "failed", "died", "running", "bad-line", "bad-result", "journal-folder", "empty", "a-file"]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A home with one run of every kind; the running one's lock held as its controller holds it."""
    home = tmp_path / "home"
    d = started(home, "succeeded", E.AttemptEnded(1, "local-a", last_step=500))
    journal(d, E.Transition(RunState.SUCCEEDED, RunState.RUNNING))
    finish(d, "succeeded", {"final_step": 500, "metrics": {"accuracy": 0.96}})
    time.sleep(0.01)
    d = started(home, "failed", E.FailureDetected("cluster_lost", region="local-a", last_step=60))
    journal(
        d,
        E.IncidentRecorded(**INCIDENT),
        E.AttemptEnded(1, "local-a", last_step=60),
        E.Transition(RunState.FAILED, RunState.RUNNING, reason="no region left to fail over to"),
    )
    finish(d, "failed", None)
    time.sleep(0.01)
    d = started(home, "died")
    lock = lock_controller(str(d))  # a controller that held the lock, and died
    assert lock is not None
    lock.close()
    sealed_progress(d, step=120, total=500)
    time.sleep(0.01)
    d = started(home, "running")
    sealed_progress(d, step=240, total=500)
    held: IO[str] | None = lock_controller(str(d))
    assert held is not None
    # Damage, each dated back so that the rows above stay the newest.
    d = started(home, "bad-line")
    with (d / "journal.jsonl").open("a") as fh:
        fh.write('{"ts": 3.0, "type": "transition", "to": "BOGUS"}\n')
    d = started(home, "bad-result")
    (d / "result.json").write_text('{"status": "SUCC')
    (home / "runs" / "journal-folder" / "journal.jsonl").mkdir(parents=True)
    (home / "runs" / "empty").mkdir()
    (home / "runs" / "a-file").write_text("not a run")
    (home / "runs" / ".DS_Store").write_text("no run id starts with a dot")
    an_hour_ago = time.time() - 3600
    for i, name in enumerate(["journal-folder", "empty", "a-file"]):
        os.utime(home / "runs" / name, (an_hour_ago + i, an_hour_ago + i))
    yield home
    held.close()


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def test_every_run_is_a_row_newest_first_and_damage_stops_nothing(home: Path) -> None:
    before = tree(home)
    rows = {r.run_id: r for r in list_runs(str(home))}
    assert tree(home) == before, "listing must write nothing"
    assert list(rows) == [
        "bad-result",
        "bad-line",
        "running",
        "died",
        "failed",
        "succeeded",
        "a-file",
        "empty",
        "journal-folder",
    ]
    assert {k: (r.status, r.step, r.total, r.incidents) for k, r in rows.items() if r.status != UNREADABLE} == {
        "running": ("RUNNING", 240, 500, 0),
        "died": (CONTROLLER_DIED, 120, 500, 0),
        "failed": ("FAILED", 60, 500, 1),
        "succeeded": ("SUCCEEDED", 500, 500, 0),
        "empty": (EMPTY, None, None, 0),
    }
    assert rows["failed"].reason == "no region left to fail over to"
    reasons = {k: r.reason for k, r in rows.items() if r.status == UNREADABLE}
    assert reasons["bad-line"].startswith("journal.jsonl: line 5 (transition) has 'to' 'BOGUS'")
    assert reasons["bad-result"].startswith("result.json: is not valid JSON")
    assert reasons["journal-folder"] == f"journal.jsonl: a folder, not a regular file; {REMOVE}"
    assert reasons["a-file"] == "is a file, not a run folder; move it aside"
    assert all("\n" not in r.reason for r in rows.values())


DAMAGE_CASES = [
    *[("journal.jsonl", d, v) for d, v in JOURNAL_DAMAGE.items()],
    *[("result.json", d, v) for d, v in RESULT_DAMAGE.items()],
]


@pytest.mark.parametrize(("name", "damage", "data"), DAMAGE_CASES, ids=[f"{n}-{d}" for n, d, _ in DAMAGE_CASES])
def test_each_damage_that_status_refuses_is_one_unreadable_row_naming_the_file(
    tmp_path: Path, name: str, damage: str, data: bytes
) -> None:
    run_dir = started(tmp_path, "r1")
    started(tmp_path, "r2")
    with (run_dir / name).open("ab" if name == "journal.jsonl" else "wb") as fh:
        fh.write(data)
    rows = {r.run_id: r for r in list_runs(str(tmp_path))}
    assert rows["r1"].status == UNREADABLE and rows["r2"].status == CONTROLLER_DIED
    assert rows["r1"].reason.startswith(f"{name}: ") and "\n" not in rows["r1"].reason
    assert len(render_table(list(rows.values())).splitlines()) == 6  # header, 2 rows, a gap, 2 reasons


def test_a_finished_row_agrees_with_action_status(home: Path) -> None:
    for run_id in ("succeeded", "failed", "running"):
        s = summarize(str(home / "runs" / run_id))
        row = next(r for r in list_runs(str(home)) if r.run_id == run_id)
        assert s is not None and (row.status, row.step, row.region) == (s["state"], s["step"], s["region"])
    result = read_result(str(home / "runs" / "succeeded"))
    assert result is not None and result["final_step"] == 500


def test_a_missing_or_empty_home_has_no_runs(tmp_path: Path) -> None:
    assert list_runs(str(tmp_path / "nowhere")) == []
    (tmp_path / "runs").mkdir()
    assert list_runs(str(tmp_path)) == []


def test_a_runs_folder_that_is_a_file_is_damage_named_by_its_path(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("x")
    with pytest.raises(DamagedFile) as info:
        list_runs(str(tmp_path))
    assert info.value.path == str(tmp_path / "runs")


# --- the command ------------------------------------------------------------------------------


def test_main_prints_json_and_an_empty_home_in_one_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["action=list", f"home={home}", "format=json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in rows][:3] == ["bad-result", "bad-line", "running"]
    assert set(rows[0]) == {
        "run_id",
        "job",
        "status",
        "region",
        "step",
        "total",
        "incidents",
        "started_at",
        "duration_s",
        "reason",
        "goodput",
        "cost_usd",
        "unpriced",
    }
    empty = home.parent / "empty-home"
    assert main(["action=list", f"home={empty}"]) == 0
    out = capsys.readouterr().out
    assert out == no_runs(str(empty)) + "\n"
    assert not empty.exists(), "listing an empty home must not create it"


def test_main_refuses_a_runs_file_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "runs").write_text("x")
    assert main(["action=list", f"home={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path}/runs: is a file")


def test_a_searchs_row_counts_its_search_steps_as_its_summary_does() -> None:
    search = {**CONFIG, "hpo": {"enabled": True, "search_space": {"lr": "choice 0.1 0.2 0.3"}, "num_samples": 6,
                                "max_t": 6}}  # fmt: skip
    started = [E.RunStarted(run_id="r1", pid=1, config=search, ts=T0), *up_to_running()[1:]]
    view = fold([*started, E.Transition(RunState.SUCCEEDED, RunState.RUNNING, ts=T0 + 60)])
    row = row_from("r1", view, result_of("SUCCEEDED", final_step=32), None, False, now=T0 + 999)
    assert fmt_step(row.step, row.total) == "32/42"


def test_a_finished_search_shows_the_steps_it_took_as_its_total(tmp_path: Path) -> None:
    # Its config's total counts every trial to max_t (6 x 7 = 42); ASHA stopped some early.
    hpo = {"enabled": True, "search_space": {"lr": "loguniform 0.01 0.2"}, "num_samples": 6, "max_t": 6}
    config = {**CONFIG, "job": {"name": "digits_hpo", "steps": 150}, "hpo": hpo}
    view = fold([E.RunStarted(run_id="s1", pid=1, config=config, ts=T0), *up_to_running("s1", T0)[1:]])
    assert row_from("s1", view, None, {"step": 20, "total": 42}, True, now=T0 + 9).total == 42
    result = result_of("SUCCEEDED", final_step=26, trials=[], best_trial={}, weights_sha256=None)
    row = row_from("s1", view, result, None, False, now=T0 + 999)
    assert (row.step, row.total) == (26, 26) and fmt_step(row.step, row.total) == "26/26"
    # And action=status says the same.
    journal(tmp_path, E.RunStarted(run_id="s1", pid=1, config=config, ts=T0), *up_to_running("s1", T0)[1:])
    (tmp_path / "result.json").write_text(json.dumps(result))
    s = summarize(str(tmp_path))
    assert s is not None and "step       26/26" in render("s1", s).splitlines()
