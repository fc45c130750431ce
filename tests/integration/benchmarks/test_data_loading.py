"""benchmarks/data_loading.py on a small synthetic set (two parts: the sharded loader needs
two or more), cached in the test's own folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = pytest.mark.integration


def test_data_loading_runs(tmp_path: Path) -> None:
    args = ("--steps", "20", "--samples", "20000", "--features", "16", "--cache-dir", str(tmp_path / "data"))
    run = run_benchmark("data_loading", tmp_path, *args)
    assert run.returncode == 0, run.said()
    assert run.figures is not None and any(k.startswith("ray_data_ratio_") for k in run.figures)
