"""benchmarks/store_list.py, small: a few mirrored runs listed from a fresh home, the
figures written as flat JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.store_list import kind_of, main, parse_args

pytestmark = pytest.mark.unit


def test_the_runs_mix_finished_failed_and_going() -> None:
    assert [kind_of(i) for i in range(10)].count(None) == 1
    assert [kind_of(i) for i in range(10)].count("FAILED") == 2
    assert parse_args([]).runs == 1000 and parse_args(["--runs", "5"]).runs == 5


def test_a_few_runs_are_listed_and_timed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ORCHESTRATOR_CONTROL_KEY", "")  # restored after: the benchmark sets and reads it
    out = tmp_path / "figures.json"
    main(["--runs", "10", "--losses", "3", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert figures["runs"] == 10 and figures["goal_s"] == 2.0
    assert figures["statuses"] == "FAILED 2, RUNNING 1, SUCCEEDED 7"  # run 0 goes on, its lease held
    # Both rounded from the same unrounded seconds: within a rounding step of each other.
    assert figures["list_command_s"] > 0
    assert figures["ratio_to_goal"] == pytest.approx(figures["list_command_s"] / 2, abs=0.001)
    assert "10 runs mirrored" in capsys.readouterr().out
