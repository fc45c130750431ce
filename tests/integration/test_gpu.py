"""job=gpt on a real GPU: device placement, NVML telemetry, exact resume after kill_region.

Runs benchmarks/gpu_check.py where CUDA is available; machines without a GPU (this
project's CI among them) skip it and say so."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import REPO

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1800)]


def test_gpt_trains_on_the_gpu_and_resumes_exactly() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine: benchmarks/gpu_check.py needs one")
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--steps", "200", "--kill-at", "110"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1700,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
