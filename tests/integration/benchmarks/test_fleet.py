"""benchmarks/fleet.py with its smallest useful setting: every policy through the recovery
decision code, with its figures and ratios, and a user's trace replayed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = pytest.mark.integration

POLICIES = ("listed", "cheapest", "cost", "cost_up")


def test_the_fleet_simulation_reports_goodput_dollars_and_misses_per_policy(tmp_path: Path) -> None:
    run = run_benchmark("fleet", tmp_path, "--runs", "30", "--seed", "3")
    assert run.returncode == 0, run.said()
    f = run.figures
    assert f is not None and f["runs"] == 30 and 0 < f["deadline_runs"] < 30
    for p in POLICIES:
        assert 0 < f[f"goodput_{p}"] <= 1 and f[f"usd_per_run_{p}"] > 0, (p, f)
        assert 0 <= f[f"deadline_misses_{p}"] <= f["deadline_runs"]
    # Cheapest-first never pays more an hour than the listed order's first region does.
    assert f["usd_per_run_cheapest"] < f["usd_per_run_listed"]
    assert f["cost_vs_cheapest_usd_ratio"] == pytest.approx(f["usd_per_run_cost"] / f["usd_per_run_cheapest"], rel=1e-3)
    assert "cost vs cheapest-first:" in run.stdout


def test_a_users_trace_replaces_the_synthetic_one_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    # us-central1 (cheapest spot) reclaimed every half hour: far more losses than a synthetic
    # trace's one a run, for the policies that start there.
    rows = [f"{0.5 * i:.1f},us-central1,preempt" for i in range(1, 200)]
    trace.write_text("time_h,region,event\n" + "\n".join(rows) + "\n0.0,us-east-1,outage_start\n")
    run = run_benchmark("fleet", tmp_path, "--runs", "5", "--trace", str(trace))
    assert run.returncode == 0, run.said()
    assert run.figures is not None and run.figures["losses_per_run_cost"] > 5
    assert run.figures["losses_per_run_listed"] < run.figures["losses_per_run_cost"]  # listed starts in us-east-1
    trace.write_text("time_h,region,event\n1.0,mars-1,preempt\n")
    bad = run_benchmark("fleet", tmp_path, "--runs", "5", "--trace", str(trace))
    assert bad.returncode != 0 and "region 'mars-1' is none of" in bad.stderr and "Traceback" not in bad.stderr
