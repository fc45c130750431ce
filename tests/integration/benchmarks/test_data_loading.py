"""benchmarks/data_loading.py on a small synthetic set (two parts: the sharded loader needs
two or more), cached in the test's own folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.bench]


def test_data_loading_runs(tmp_path: Path) -> None:
    """Both comparisons: the runs, and (--search) a search of one trial of two workers per loader."""
    args = ("--steps", "20", "--samples", "20000", "--features", "16", "--cache-dir", str(tmp_path / "data"))
    search = ("--search", "--trials", "1", "--iterations", "1", "--trial-workers", "2")
    run = run_benchmark("data_loading", tmp_path, *args, *search)
    assert run.returncode == 0, run.said()
    figures = run.figures
    assert figures is not None and any(k.startswith("ray_data_ratio_") for k in figures)
    assert figures["search_ray_data_ratio_samples_per_s"] is not None
    for loader in ("sharded", "ray_data"):
        assert figures[f"search_{loader}_trial_00000_samples_per_s"] > 0, figures
