"""benchmarks/overhead.py's arithmetic and arguments, driven with made-up runs (no Ray)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.common import write_json
from benchmarks.overhead import (
    CADENCES,
    CHECKPOINTING,
    ArmRun,
    checkpoints_in,
    figures,
    median_ratio,
    parse_args,
    realistic_interval,
    stall_fraction,
    stall_from_cadences,
    table,
    verdicts,
)

pytestmark = pytest.mark.unit


STEPS = 6000


def rate(t0: float, stall: float, interval: int, steps: int = STEPS) -> float:
    """Steps/s of a run of ``steps`` whose step costs t0 and whose checkpoint (every ``interval``
    steps and at the last) costs ``stall``."""
    return steps / (steps * t0 + checkpoints_in(steps, interval) * stall)


def test_realistic_interval_is_the_steps_of_the_target_seconds() -> None:
    assert realistic_interval(412.4, 10.0) == 4124
    assert realistic_interval(0.01, 10.0) == 1  # never zero: at least a checkpoint per step


def test_median_ratio_is_per_round_then_median() -> None:
    assert median_ratio([90.0, 50.0, 99.0], [100.0, 100.0, 100.0]) == pytest.approx(0.9)
    # Per round, not the ratio of medians: a slow round slows both sides.
    assert median_ratio([45.0, 90.0], [50.0, 100.0]) == pytest.approx(0.9)
    assert median_ratio([1.0], [0.0]) is None


def test_checkpoints_in_counts_the_last_step() -> None:
    assert checkpoints_in(6000, 50) == 120
    assert checkpoints_in(6000, 4000) == 2  # step 4000 and step 6000
    assert checkpoints_in(600, 4000) == 1


def test_stall_from_two_cadences_recovers_the_checkpoint_cost() -> None:
    t0, stall = 0.004, 0.02
    for high, real in ((50, 2000), (50, 2500), (500, 4000)):  # 2500, 4000: a shorter last interval
        s = stall_from_cadences(rate(t0, stall, high), high, rate(t0, stall, real), real, STEPS)
        assert s == pytest.approx(stall)
    # Either order of the two cadences.
    s = stall_from_cadences(rate(t0, stall, 2000), 2000, rate(t0, stall, 50), 50, STEPS)
    assert s == pytest.approx(stall)


def test_stall_from_cadences_noise_and_same_count() -> None:
    assert stall_from_cadences(101.0, 50, 100.0, 2000, STEPS) == 0.0  # more checkpoints faster: noise
    assert stall_from_cadences(100.0, 50, 100.0, 50, STEPS) is None
    assert stall_from_cadences(100.0, 4000, 99.0, 5000, STEPS) is None  # 2 checkpoints either way


def test_stall_fraction_is_over_the_interval_training_time() -> None:
    # 400 steps at 100 steps/s: a 4 s interval; 0.1 s of stall is 2.5% of it.
    assert stall_fraction(0.1, 400, 100.0) == pytest.approx(0.025)
    assert stall_fraction(None, 400, 100.0) is None


def made_up_runs(intervals: dict[str, int]) -> dict[tuple[str, str], list[ArmRun]]:
    t0 = 0.005  # 200 steps/s bare
    stalls = {"ray_native": 0.05, "async": 0.004, "sync": 0.03}
    runs: dict[tuple[str, str], list[ArmRun]] = {("none", "-"): [ArmRun(1 / t0), ArmRun(1 / t0)]}
    for arm in CHECKPOINTING:
        for cadence in CADENCES:
            r = rate(t0, stalls[arm], intervals[cadence])
            measured = stalls[arm] if arm == "ray_native" else None
            size = 700_000 if arm == "ray_native" else None
            runs[(arm, cadence)] = [ArmRun(r, measured, 3, size), ArmRun(r, measured, 3, size)]
    return runs


def test_figures_have_the_flat_keys_and_the_ratios() -> None:
    intervals = {"high": 50, "realistic": 2000}
    fig = figures(made_up_runs(intervals), intervals, steps=STEPS, rounds=2)
    assert fig["realistic_interval_steps"] == 2000
    assert fig["steps_per_s_none"] == pytest.approx(200.0)
    # 0.004 s per 50 steps of 0.005 s: 1 / (1 + 0.004 / 0.25)
    assert fig["steps_ratio_async_high"] == pytest.approx(1 / 1.016, abs=1e-4)
    assert fig["steps_ratio_async_realistic"] == pytest.approx(1 / (1 + 0.004 / 10), abs=1e-4)
    assert fig["steps_ratio_ray_native_high"] == pytest.approx(1 / 1.2, abs=1e-4)
    assert fig["steps_ratio_vs_ray_native"] == pytest.approx(
        fig["steps_per_s_async_realistic"] / fig["steps_per_s_ray_native_realistic"], abs=1e-3
    )
    assert fig["stall_s_async"] == pytest.approx(0.004, abs=1e-5)
    assert fig["stall_s_sync"] == pytest.approx(0.03, abs=1e-5)
    assert fig["stall_s_ray_native"] == pytest.approx(0.05)  # measured
    assert fig["stall_s_ray_native_estimated"] == pytest.approx(0.05, abs=1e-5)
    # 2000 steps at 200 steps/s: 10 s per checkpoint.
    assert fig["stall_frac_async"] == pytest.approx(0.0004, abs=1e-6)
    assert fig["stall_frac_ray_native"] == pytest.approx(0.005, abs=1e-6)
    assert fig["checkpoint_bytes"] == 700_000
    for key in (
        "steps_ratio_sync_high",
        "steps_ratio_sync_realistic",
        "steps_ratio_ray_native_realistic",
        "steps_ratio_vs_ray_native_high",
    ):
        assert key in fig


def test_figures_go_through_write_json_and_the_table(tmp_path: Path) -> None:
    intervals = {"high": 50, "realistic": 2000}
    fig = figures(made_up_runs(intervals), intervals, steps=STEPS, rounds=2)
    write_json(str(tmp_path / "o.json"), fig)  # raises on a key or value that is not flat
    back = json.loads((tmp_path / "o.json").read_text())
    assert back["steps_ratio_async_realistic"] == fig["steps_ratio_async_realistic"]
    assert "date" in back
    text = table(fig)
    assert len(text.splitlines()) == 2 + len(CHECKPOINTING) * len(CADENCES)
    assert "Ray native" in text and "~" in text  # ours marked as estimated
    said = "\n".join(verdicts(fig))
    assert "ours async / none, realistic cadence: 1.000 (goal >= 0.97: met)" in said
    assert "ours sync / Ray native, high cadence" in said


def test_parse_args_json_and_cadences() -> None:
    args = parse_args(["--steps", "900", "--rounds", "1", "--json", "out.json", "--realistic-interval", "400"])
    assert (args.steps, args.rounds, args.json, args.realistic_interval) == (900, 1, "out.json", 400)
    d = parse_args([])
    assert (d.interval, d.realistic_s, d.realistic_interval, d.json) == (50, 10.0, None, None)


@pytest.mark.parametrize("argv", [["--interval", "0"], ["--realistic-s", "0"], ["--rounds", "0"]])
def test_parse_args_refuses_non_positive(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    err = capsys.readouterr().err
    assert "expected" in err and "Traceback" not in err


def test_a_stall_the_runtime_reports_is_taken_over_the_estimate() -> None:
    intervals = {"high": 50, "realistic": 2000}
    runs = made_up_runs(intervals)
    for arm in ("async", "sync"):
        for cadence in CADENCES:
            runs[(arm, cadence)] = [
                replace(r, stall_s=0.002 if cadence == "high" else 0.001) for r in runs[(arm, cadence)]
            ]
    fig = figures(runs, intervals, steps=STEPS, rounds=2)
    assert fig["stall_measured_async"] and not fig["stall_ours_is_estimate"]
    assert fig["stall_s_async"] == pytest.approx(0.001) and fig["stall_s_async_high"] == pytest.approx(0.002)
    assert fig["stall_s_async_estimated"] == pytest.approx(0.004, abs=1e-5)  # still reported beside it
    assert "~" not in table(fig)
    assert any("async" in line and "(measured;" in line for line in verdicts(fig))
