"""benchmarks/controller_cpu.py's pure parts: the training window and the CPU fraction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.controller_cpu import cpu_fraction, journal_times, parse_args

pytestmark = pytest.mark.unit


def test_the_fraction_is_cpu_seconds_per_wall_second_inside_the_window() -> None:
    samples = [(0.0, 0.0), (10.0, 5.0), (20.0, 5.5), (30.0, 6.0), (40.0, 9.0)]
    assert cpu_fraction(samples, 10.0, 30.0) == pytest.approx(0.05)
    assert cpu_fraction(samples, 11.0, 12.0) is None  # no two samples inside


def test_the_window_is_the_first_train_started_to_the_attempts_end(tmp_path: Path) -> None:
    lines = [
        {"ts": 1.0, "type": "run_started"},
        {"ts": 5.0, "type": "runtime.train_started", "time": 4.5},
        {"ts": 9.0, "type": "runtime.train_started", "time": 8.5},
        {"ts": 20.0, "type": "attempt_ended"},
    ]
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"ts": 2')
    assert journal_times(tmp_path) == (4.5, 20.0)
    assert journal_times(tmp_path / "none") == (None, None)
    assert parse_args(["--json", "x.json"]).json == "x.json"
