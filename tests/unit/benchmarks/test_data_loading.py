"""benchmarks/data_loading.py's figures: each loader and the ratios."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import data_loading
from tests.unit.benchmarks.test_common import written

pytestmark = pytest.mark.unit


def test_data_loading_figures_give_each_loader_and_the_ratios(tmp_path: Path) -> None:
    def row(loader: str, scale: float) -> dict[str, Any]:
        return {
            "loader": loader,
            "wall_s": 10.0 * scale,
            "steps_per_s": 30.0 / scale,
            "samples_per_s": 3000.0 / scale,
            "worker_peak_rss": int(400e6 * scale),
            "ray_peak_rss": int(900e6 * scale),
            "tcp_bytes": int(5e6 * scale),
            "io_bytes": 0,
            "cpu_percent": 95.0,
            "accuracy": 0.9,
        }

    rows = [row("sharded", 1.0), row("ray_data", 2.0)]
    assert "ray_data / sharded" in data_loading.table(rows)
    out = written(tmp_path, data_loading.figures(rows))
    assert out["sharded_steps_per_s"] == 30.0 and out["ray_data_steps_per_s"] == 15.0
    assert out["sharded_worker_peak_rss_mb"] == 400.0 and out["ray_data_tcp_mb"] == 10.0
    assert out["ray_data_ratio_wall_s"] == 2.0 and out["ray_data_ratio_steps_per_s"] == 0.5
    assert out["ray_data_ratio_io_mb"] is None  # sharded's was 0
