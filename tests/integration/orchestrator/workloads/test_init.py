"""The user's code at the boundary: import paths, the protocol, params against a Params
dataclass, the command line's say over which code trains, and --config-dir. Every failure
is one ConfigError naming the key, raised before anything launches.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.integration


def test_bad_user_code_is_one_line_and_exit_2_from_the_cli(userpkg: Path, tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(userpkg), "ORCHESTRATOR_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    for args, key in (
        (["job.workload=usermods:NoLoss"], "job.workload"),
        (["job.workload=tinywork:Tiny", "job.params.colour=red"], "job.params.colour"),
        (["job.train_func=nosuch:f"], "job.train_func"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", *args], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {key}:"), proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "home" / "runs").exists()  # nothing launched, nothing written
