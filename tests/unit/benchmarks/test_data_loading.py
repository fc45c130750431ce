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


def search_result(per_rank: list[tuple[str, float]], accuracy: dict[str, float]) -> dict[str, Any]:
    """A search's result.json, as much of it as the benchmark reads: one telemetry entry
    per (trial, rank), each rank's samples/s given."""
    workers = [
        {
            "trial_id": trial,
            "samples_per_s": sps,
            "cpu_percent": 50.0 + 10 * i,
            "peak_rss_bytes": int(100e6 * (i + 1)),
            "net_bytes_sent": 1_000_000,
            "net_bytes_recv": 2_000_000,
        }
        for i, (trial, sps) in enumerate(per_rank)
    ]
    return {
        "telemetry": {"workers": workers},
        "trials": [{"trial_id": t, "metrics": {"accuracy": a}} for t, a in accuracy.items()],
    }


def test_a_trials_row_adds_up_its_workers_and_the_search_row_is_the_trials_mean() -> None:
    result = search_result(
        [("trial_00000", 100.0), ("trial_00000", 120.0), ("trial_00001", 80.0), ("trial_00001", 60.0)],
        {"trial_00000": 0.9, "trial_00001": 0.7},
    )
    rows = data_loading.trial_rows(result, "sharded")
    assert [(r["trial"], r["workers"], r["samples_per_s"]) for r in rows] == [
        ("trial_00000", 2, 220.0),
        ("trial_00001", 2, 140.0),
    ]
    first = rows[0]
    assert first["cpu_percent"] == 55.0 and first["worker_peak_rss"] == int(200e6) and first["tcp_bytes"] == 6_000_000
    summary = data_loading.search_summary("sharded", rows, 30.0, int(2e9), 0)
    assert summary["samples_per_s"] == 180.0 and summary["accuracy"] == pytest.approx(0.8)
    assert summary["wall_s"] == 30.0 and summary["ray_peak_rss"] == int(2e9)
    with pytest.raises(SystemExit, match="the ray_data search reported no trial's telemetry"):
        data_loading.search_summary("ray_data", [], 30.0, 0, 0)


def test_the_search_figures_are_prefixed_flat_and_per_trial(tmp_path: Path) -> None:
    rows = {
        loader: data_loading.trial_rows(search_result([("trial_00000", sps)], {"trial_00000": 0.5}), loader)
        for loader, sps in (("sharded", 100.0), ("ray_data", 50.0))
    }
    searches = [data_loading.search_summary(loader, r, 10.0, int(1e9), 10) for loader, r in rows.items()]
    out = written(
        tmp_path,
        {
            **data_loading.figures(searches, data_loading.SEARCH_COLUMNS, prefix="search_"),
            **data_loading.trial_figures(rows["sharded"] + rows["ray_data"]),
        },
    )
    assert out["search_ray_data_ratio_samples_per_s"] == 0.5 and out["search_sharded_tcp_mb"] == 3.0
    assert "search_sharded_steps_per_s" not in out  # a search has no steps/s of its own
    assert out["search_ray_data_trial_00000_samples_per_s"] == 50.0
    assert out["search_sharded_trial_00000_worker_peak_rss_mb"] == 100.0
    assert "ray_data / sharded" in data_loading.table(searches, data_loading.SEARCH_COLUMNS)
    assert "trial_00000" in data_loading.table(rows["sharded"], data_loading.TRIAL_COLUMNS, ratio=False)


@pytest.mark.parametrize("flag", ["--trials", "--iterations", "--trial-workers"])
def test_a_search_size_below_one_is_refused_naming_its_flag(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        data_loading.parse_args(["--search", flag, "0"])
    assert f"{flag} must be 1 or more" in capsys.readouterr().err
