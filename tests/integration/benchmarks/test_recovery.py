"""benchmarks/recovery.py with its smallest useful settings: the region lost after the first checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.bench]


def test_recovery_runs(tmp_path: Path) -> None:
    run = run_benchmark("recovery", tmp_path, "--steps", "200", "--kill-at", "120")
    assert run.returncode == 0, run.said()
    assert run.figures is not None and run.figures["kill_at"] == 120
