"""benchmarks/ddp_options.py with its smallest useful settings: one small model, one round."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = pytest.mark.integration


def test_ddp_options_runs(tmp_path: Path) -> None:
    run = run_benchmark("ddp_options", tmp_path, "--hidden", "16", "--steps", "20", "--rounds", "1")
    assert run.returncode == 0, run.said()
    figures = run.figures
    assert figures is not None and figures["world"] == 4
    assert figures["h16_steps_per_s_default"] > 0 and figures["h16_steps_per_s_exact"] > 0
    assert figures["steps_ratio_exact_vs_default"] == figures["h16_steps_ratio_exact_vs_default"] > 0
