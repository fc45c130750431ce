"""benchmarks/gpu_check.py with its smallest settings: on a machine without a GPU it says
so and exits 2 (its documented status); with one, every check must hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = pytest.mark.integration


def test_gpu_check_runs(tmp_path: Path) -> None:
    import torch

    run = run_benchmark("gpu_check", tmp_path, "--steps", "60", "--kill-at", "55")
    if torch.cuda.is_available():
        assert run.returncode == 0, run.said()
    else:
        assert run.returncode == 2, run.said()
        assert run.figures is not None and run.figures["gpu"] is None
    assert "Traceback" not in run.stderr, run.said()
