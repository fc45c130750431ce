"""``cloud.dashboard``: each cluster's Ray dashboard on loopback, checked up to the clouds'
boundary. The SkyPilot task's run script runs here in bash (a fake Python records how Ray
would be started); the local provider's real clusters are in tests/integration.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from orchestrator.config.compose import compose
from providers.skypilot.scripts import RUN_SCRIPT
from providers.skypilot.task import task_config
from tests.support.paths import REPO

pytestmark = pytest.mark.integration

# Records its arguments, one call a line.
FAKE_PYTHON = '#!/bin/sh\necho "$*" >> "$(dirname "$0")/calls.txt"\n'


def _run_script(tmp_path: Path, envs: dict[str, str], rank: str = "0") -> tuple[list[str], Path]:
    """RUN_SCRIPT as a node runs it, with a fake Python and a ``sleep`` that returns."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    py = bin_dir / "python"
    py.write_text(FAKE_PYTHON)
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    for f in (py, bin_dir / "sleep"):
        f.chmod(0o755)
    node = tmp_path / "node"
    env = {
        **envs,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "ORCH_PYTHON": str(py),
        "ORCH_NODE_DIR": str(node),
        "SKYPILOT_NODE_RANK": rank,
        "SKYPILOT_NUM_NODES": "1" if rank == "0" else "2",
        "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2",
        "RAY_AUTH_TOKEN": "t0ken",
    }
    done = subprocess.run(["bash", "-c", RUN_SCRIPT], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return (bin_dir / "calls.txt").read_text().splitlines(), node


def test_a_skypilot_head_starts_its_dashboard_on_loopback_with_the_token_beside_it(tmp_path: Path) -> None:
    rc = compose(["cloud=aws"]).cloud.regions["us-east-1"]
    envs = task_config("us-east-1", rc, "c", workdir=str(REPO), ray_port=21000, dashboard_port=22000)["envs"]
    assert envs["ORCH_DASHBOARD_PORT"] == "22000"
    (call,), node = _run_script(tmp_path / "on", envs)
    assert call.startswith("-m providers.raystart start --no-ray-client --head --port=21000 ")
    assert " --include-dashboard=true --dashboard-host=127.0.0.1 --dashboard-port=22000 " in call
    token = node / "auth_token"
    assert token.read_text() == "t0ken" and stat.S_IMODE(token.stat().st_mode) == 0o600


def test_without_the_key_no_dashboard_and_no_token_file_and_workers_never_start_one(tmp_path: Path) -> None:
    rc = compose(["cloud=aws"]).cloud.regions["us-east-1"]
    envs = task_config("us-east-1", rc, "c", workdir=str(REPO), ray_port=21000)["envs"]
    assert "ORCH_DASHBOARD_PORT" not in envs
    (call,), node = _run_script(tmp_path / "off", envs)
    assert "--include-dashboard=false" in call and "--dashboard-host" not in call
    assert not (node / "auth_token").exists()
    # A worker node waits for the head (providers.skypilot.nodes), then joins it.
    (_wait, call), _ = _run_script(tmp_path / "worker", {**envs, "ORCH_DASHBOARD_PORT": "22000"}, "1")
    assert call.startswith("-m providers.raystart start --no-ray-client --address=10.0.0.1:21000 ")
    assert "dashboard" not in call
