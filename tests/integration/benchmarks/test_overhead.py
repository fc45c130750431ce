"""benchmarks/overhead.py with its smallest settings on a fresh HOME (no ``~/.ray``), and
the bare arm's driver reaching a second round's cluster, whose token is a new one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.benchmarks import run_benchmark
from tests.support.paths import REPO

pytestmark = pytest.mark.integration

# Two rounds' bare clusters in one driver process, as main() makes them (a process of its
# own: the driver changes its environment and connects to Ray).
TWO_ROUNDS = """
from benchmarks.overhead import BareCluster

for _ in range(2):
    with BareCluster():
        import ray

        assert ray.cluster_resources().get("CPU") == 2
print("both rounds connected")
"""


@pytest.mark.bench
def test_overhead_runs(tmp_path: Path) -> None:
    args = ("--steps", "40", "--rounds", "1", "--interval", "10", "--realistic-interval", "20")
    run = run_benchmark("overhead", tmp_path, *args)
    assert run.returncode == 0, run.said()
    assert run.figures is not None


def test_the_bare_driver_reaches_each_rounds_cluster(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", TWO_ROUNDS],
        cwd=REPO,
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "both rounds connected" in proc.stdout, proc.stderr[-3000:]
