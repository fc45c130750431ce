"""A run's page as data: action=status's summary, the report's incidents, the stores, the
standby, the drills, the objectives, a request not yet taken, the commands."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.console.checkpoints import StoreCheckpoint
from orchestrator.console.runpage import (
    FactsCache,
    command_lines,
    detail_json,
    drill_rows,
    objective_rows,
    pending_line,
    run_detail,
    standby_lines,
    store_rows,
)
from orchestrator.control.stopreq import DRILL_NAME, this_request, write_request
from orchestrator.runstate import events as E
from orchestrator.runstate.journal import Journal
from tests.support.console_runs import config, live_run, make_run
from tests.unit.orchestrator.console.conftest import LIVE

pytestmark = pytest.mark.unit


def test_an_ended_failover_shows_its_incident_stores_and_objectives(tmp_path: Path) -> None:
    now = time.time()
    make_run(tmp_path, "r", "failover", t0=now - 300)
    d = run_detail(str(tmp_path), "r", now, FactsCache())
    assert d is not None and (d["status"], d["region"], d["attempt"], d["step"]) == (
        "SUCCEEDED",
        "local-b",
        "2",
        "500/500",
    )
    (inc,) = d["tables"]["incidents"]
    assert inc[1] == "kill_region (step 60)" and inc[4] == "failover" and inc[6:8] == ["50", "10"]
    assert inc[8].endswith("s") and d["objectives_note"] == "all met"
    assert [r[0] for r in d["tables"]["objectives"]] == ["max_rto_s", "max_lost_steps"]
    assert [r[2] for r in d["tables"]["stores"]] == ["500", "500", "500"]
    assert d["goodput"][0].endswith("(10 steps trained twice)") and d["goodput"][1].startswith("$")
    assert not d["live"] and d["pending"] == ""
    fields = detail_json(d)["fields"]
    assert fields["f-status"] == "SUCCEEDED" and fields["f-standby"] == "none (recovery.standby=false)"


def test_a_run_whose_controller_died_says_so_with_the_command_that_goes_on(tmp_path: Path) -> None:
    now = time.time()
    make_run(tmp_path, "r", "running", t0=now - 100)
    d = run_detail(str(tmp_path), "r", now, FactsCache())
    assert d is not None and d["status"] == "CONTROLLER_DIED" and "action=resume run_id=r" in d["note"]
    assert d["controller"].startswith("pid 4242 on console-test") and "ready in local-b" in d["standby"][0]


def test_no_run_no_page(tmp_path: Path) -> None:
    assert run_detail(str(tmp_path), "nope", 0.0, FactsCache()) is None


def test_the_facts_are_read_again_when_the_journal_grows(tmp_path: Path) -> None:
    run_dir = live_run(tmp_path, LIVE)
    cache = FactsCache(most=1)
    first = cache.facts(str(run_dir))
    assert cache.facts(str(run_dir)) is first
    Journal(str(run_dir / "journal.jsonl")).emit(E.StandbyLost(region="local-b", generation=2))
    assert cache.facts(str(run_dir)) is not first and len(cache.facts(str(run_dir)).events) == len(first.events) + 1


def test_the_standby_story_newest_last() -> None:
    events = [
        E.StandbyReady(ts=1.0, region="b", generation=2, cluster="c2"),
        E.StandbyLost(ts=2.0, region="b", generation=2),
        E.StandbyFailed(ts=3.0, region="c", generation=3, error="quota"),
        E.StandbyActivated(ts=4.0, region="c", generation=3),
        E.PoolJoined(ts=5.0, pool="p", region="b"),
        E.PoolLaunched(ts=6.0, pool="p", region="b", error="no"),
        E.PoolTaken(ts=7.0, pool="p", region="b", taken=False, reason="another run"),
    ]
    lines = standby_lines(events, {})
    assert [line.split("  ", 1)[1] for line in lines] == [
        "ready in b (cluster c2, attempt g2)",
        "lost in b",
        "failed in c: quota",
        "taken over in c at a failover (attempt g3)",
        "waits on pool p's standby in b",
        "launched pool p's standby in b: failed: no",
        "pool p's standby in b: not taken (another run)",
    ]
    assert standby_lines([], {"recovery": {"standby": True}}) == ["none up yet"]
    assert standby_lines([], {"recovery": "damaged"}) == ["none (recovery.standby=false)"]


def test_drills_and_objectives() -> None:
    drills = drill_rows(
        [
            E.DrillRequested(ts=1.0, kind="kill_region", who="a@b pid 1", region="x", source="console"),
            E.DrillRequested(ts=2.0, kind="kill_node", who="a@b pid 2", refused="no node"),
        ]
    )
    assert [r[1:] for r in drills] == [
        ["kill_region", "x", "a@b pid 1", "console", "injected"],
        ["kill_node", "-", "a@b pid 2", "cli", "refused: no node"],
    ]
    cfg = config(Path("/h"), objectives={"max_rto_s": 30.0, "max_lost_steps": None, "exact": None})
    rows, note = objective_rows(None, cfg)
    assert rows == [["max_rto_s", "30.0", "-", "judged at the run's end"]] and note == "judged when the run ends"
    judged = {
        "met": False,
        "checked": [
            {"objective": "exact", "limit": "b", "measured": None, "met": False, "why": "no finished run named 'b'"}
        ],
    }
    rows, note = objective_rows({"objectives": judged}, cfg)
    assert rows == [["exact", "b", "-", "missed (no finished run named 'b')"]] and note == "missed"
    assert objective_rows(None, {}) == ([], "none set (chaos.objectives)")


def test_a_request_waiting_for_the_controller_is_said(tmp_path: Path) -> None:
    run_dir = live_run(tmp_path, LIVE)
    assert pending_line(str(run_dir)) == ""
    write_request(str(run_dir), this_request("drill", {"kind": "kill_region"}, source="console"), DRILL_NAME)
    line = pending_line(str(run_dir))
    assert line.startswith("drill kill_region asked (") and "from the console" in line
    assert (run_dir / DRILL_NAME).exists(), "read, not taken: the controller takes it"


def test_stores_and_commands(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    rows = store_rows({"local-b": StoreCheckpoint("local-b", 40, 90.0, 0.25), "x": StoreCheckpoint("x")}, cfg, 100.0)
    assert [r[0] for r in rows] == ["local-a", "local-b", "local-c", "x"]
    assert rows[1][2:] == ["40", "10s ago", "0.25s", ""] and rows[0][2:] == ["-", "-", "-", ""]
    lines = dict(command_lines("/h o", LIVE))
    assert lines["stop"] == f"python -m orchestrator action=stop run_id={LIVE} home='/h o'"
    assert lines["resume"] == f"python -m orchestrator action=resume run_id={LIVE} home='/h o'"
    assert dict(command_lines("/h", "a;b"))["stop"].startswith("python -m orchestrator action=stop run_id='a;b'")
