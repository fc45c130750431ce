"""benchmarks/tracking.py's arithmetic and arguments, with made-up runs (no server, no Ray)."""

from __future__ import annotations

import pytest

from benchmarks.tracking import figures, overrides, parse_args, table

pytestmark = pytest.mark.unit


def test_the_ratios_are_per_round_then_the_median() -> None:
    f = figures({"none": [(100.0, 50.0), (200.0, 40.0)], "mlflow": [(101.0, 49.5), (220.0, 40.0)]})
    assert f["wall_ratio"] == pytest.approx((1.01 + 1.1) / 2)
    assert f["throughput_ratio"] == pytest.approx((0.99 + 1.0) / 2)
    assert f["none_wall_s"] == 150.0 and f["mlflow_steps_per_s"] == pytest.approx(44.75)
    assert "wall time mlflow / none: 1.0550" in table(f)


def test_the_arms_differ_by_the_tracker_alone() -> None:
    assert overrides("none", 300, "http://127.0.0.1:1") == ["job.steps=300"]
    assert overrides("mlflow", 300, "http://127.0.0.1:1") == [
        "job.steps=300",
        "tracking=mlflow",
        "tracking.uri=http://127.0.0.1:1",
    ]
    assert parse_args([]).rounds == 1 and parse_args(["--steps", "10"]).steps == 10
