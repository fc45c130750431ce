"""benchmarks/controller_cpu.py with its smallest useful settings: a run long enough for a few CPU samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.bench]


def test_controller_cpu_runs(tmp_path: Path) -> None:
    run = run_benchmark("controller_cpu", tmp_path, "--steps", "600")
    assert run.returncode == 0, run.said()
    assert run.figures is not None and run.figures["steps"] == 600
    assert 0 <= run.figures["controller_cpu_frac"] < 1
