"""The runs page's rows: action=list's rows, kept between polls while an ended run's
files stay as they were, each with its stores' newest checkpoints."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.commands import runs_list
from orchestrator.commands.runs_list import RunRow
from orchestrator.console.checkpoints import StoreCheckpoint
from orchestrator.console.runs import HomeRuns, progress_of, row_json, run_href, runs_json, statuses
from orchestrator.runstate import events as E
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.runfiles import DamagedFile
from tests.support.console_runs import make_run

pytestmark = pytest.mark.unit


def counted(home: Path) -> tuple[HomeRuns, list[str]]:
    read: list[str] = []

    def read_row(runs_dir: str, name: str, now: float) -> RunRow:
        read.append(name)
        return runs_list.read_row(runs_dir, name, now)

    return HomeRuns(str(home), read_row), read


def test_the_rows_are_list_runs_rows_newest_first(tmp_path: Path) -> None:
    now = time.time()
    make_run(tmp_path, "old", "clean", t0=now - 900)
    make_run(tmp_path, "new", "failover", t0=now - 300)
    rows = HomeRuns(str(tmp_path)).rows(now)
    assert [r for r, _ in rows] == runs_list.list_runs(str(tmp_path), now)
    stores = dict(rows)[runs_list.list_runs(str(tmp_path), now)[0]]
    assert {s.region: s.step for s in stores.values()} == {"local-a": 500, "local-b": 500, "local-c": 500}


def test_an_ended_run_is_read_once_while_its_files_stay_and_a_live_one_every_time(tmp_path: Path) -> None:
    now = time.time()
    make_run(tmp_path, "ended", "clean", t0=now - 900)
    make_run(tmp_path, "going", "running", t0=now - 300)
    home, read = counted(tmp_path)
    home.rows(now)
    home.rows(now)
    assert sorted(read) == ["ended", "going", "going"]
    Journal(str(tmp_path / "runs" / "ended" / "journal.jsonl")).emit(E.RunResumed(pid=3))
    home.rows(now)
    assert read.count("ended") == 2


def test_a_removed_run_leaves_the_rows_and_a_hidden_name_is_none(tmp_path: Path) -> None:
    now = time.time()
    make_run(tmp_path, "a", "clean", t0=now - 100)
    (tmp_path / "runs" / ".partial").mkdir()
    home = HomeRuns(str(tmp_path))
    assert [r.run_id for r, _ in home.rows(now)] == ["a"]
    import shutil

    shutil.rmtree(tmp_path / "runs" / "a")
    assert home.rows(now) == []


def test_a_runs_folder_that_is_a_file_is_said(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("x")
    with pytest.raises(DamagedFile):
        HomeRuns(str(tmp_path)).rows(0.0)
    assert HomeRuns(str(tmp_path / "missing")).rows(0.0) == []


def test_a_row_as_the_api_gives_it() -> None:
    row = RunRow(run_id="r 1/x", status="RUNNING", job="j" * 500, step=50, total=200, goodput=0.5, cost_usd=0.01)
    out = row_json(row, {"a": StoreCheckpoint("a", 50, 90.0, 0.2)}, now=100.0)
    assert out["href"] == "/runs/r%201%2Fx" and out["progress"] == 0.25 and len(out["job"]) == 100
    assert out["text"] == {
        "step": "50/200",
        "started": "-",
        "duration": "-",
        "goodput": "50%",
        "cost": "$0.0100",
        "incidents": "-",
    }
    assert out["checkpoints"] == [{"region": "a", "step": 50, "age_s": 10.0, "text": "a: step 50, 10s ago"}]
    assert row_json(RunRow(run_id="u", status="X", unpriced=True), {}, 0.0)["text"]["cost"] == "?"


def test_progress_statuses_and_the_filter() -> None:
    assert progress_of(5, 10) == 0.5 and progress_of(50, 10) == 1.0
    assert progress_of(None, 10) is None and progress_of(5, 0) is None and progress_of(5, None) is None
    rows = [{"status": s} for s in ("FAILED", "CONTROLLER_DIED", "RUNNING", "FAILED", "EMPTY")]
    assert statuses(rows) == ["RUNNING", "FAILED", "CONTROLLER_DIED", "EMPTY"]
    assert run_href("a") == "/runs/a"


def test_the_api_filters_by_status(tmp_path: Path) -> None:
    now = time.time()
    make_run(tmp_path, "ok", "clean", t0=now - 100)
    make_run(tmp_path, "bad", "failed", t0=now - 200)
    home = HomeRuns(str(tmp_path))
    every = runs_json(home, now)
    assert every["total"] == 2 and [r["run_id"] for r in every["runs"]] == ["ok", "bad"]
    failed = runs_json(home, now, "FAILED")
    assert [r["run_id"] for r in failed["runs"]] == ["bad"] and failed["statuses"] == ["SUCCEEDED", "FAILED"]
