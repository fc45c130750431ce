"""benchmarks/vs_skypilot_jobs.py needs CI's Slurm cluster (.ci/slurm/setup): where it is
up, one trial of ours with the smallest settings; where it is not, the script says so in
one line and exits non-zero, without a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.benchmarks import run_benchmark
from tests.support.paths import REPO

pytestmark = [pytest.mark.integration, pytest.mark.bench]


def slurm_up() -> bool:
    check = subprocess.run(["bash", str(REPO / ".ci" / "slurm" / "setup"), "--check"], capture_output=True, timeout=60)
    return check.returncode == 0


def test_vs_skypilot_jobs_runs(tmp_path: Path) -> None:
    # The user's HOME: the cluster's SSH key and ~/.slurm/config live there.
    if not slurm_up():
        run = run_benchmark("vs_skypilot_jobs", tmp_path, "--trials", "1", fresh_home=False)
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.said()
        assert "the CI Slurm cluster is not up" in run.stderr
        return
    args = ("--trials", "1", "--systems", "ours", "--steps", "300", "--interval", "50", "--cancel-at", "100")
    run = run_benchmark("vs_skypilot_jobs", tmp_path, *args, timeout=900, fresh_home=False)
    assert run.returncode == 0, run.said()
