"""kill_worker on a SkyPilot cluster: the pid is the head's, so the signal is sent there,
and only to a process of that cluster (its Ray processes carry its node dir)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.chaos.processes import kill_victim
from providers.base import ClusterHandle
from providers.skypilot.provider import SkyPilotProvider
from providers.skypilot.scripts import NOT_OURS, kill_script

pytestmark = pytest.mark.integration
NODE_DIR = "/tmp/osky-testnode"


def sleeper(node_dir: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_TMPDIR"}
    if node_dir is not None:
        env["RAY_TMPDIR"] = node_dir
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)


def alive(proc: subprocess.Popen[bytes]) -> bool:
    time.sleep(0.2)
    return proc.poll() is None


@pytest.mark.parametrize("node_dir", [None, NODE_DIR + "-other", NODE_DIR + "/sub"])
def test_the_script_leaves_a_process_of_no_cluster_or_another_alone(node_dir: str | None) -> None:
    proc = sleeper(node_dir)
    try:
        done = subprocess.run(["bash", "-c", kill_script(proc.pid, NODE_DIR)], capture_output=True, timeout=30)
        assert done.returncode == NOT_OURS
        assert alive(proc)
    finally:
        proc.kill()
        proc.wait()


def test_the_script_kills_a_process_of_the_cluster_and_refuses_a_pid_that_is_gone() -> None:
    proc = sleeper(NODE_DIR)
    done = subprocess.run(["bash", "-c", kill_script(proc.pid, NODE_DIR)], capture_output=True, timeout=30)
    assert done.returncode == 0
    assert proc.wait(timeout=10) == -signal.SIGKILL
    again = subprocess.run(["bash", "-c", kill_script(proc.pid, NODE_DIR)], capture_output=True, timeout=30)
    assert again.returncode == NOT_OURS


def test_chaos_kill_worker_on_a_skypilot_cluster_goes_through_the_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider's ssh to the head, run here with bash: the cluster's worker dies,
    a process of no cluster named by a forged request lives."""
    provider = SkyPilotProvider({}, out=io.StringIO())
    sent: list[str] = []

    def ssh_here(handle: ClusterHandle, command: str, check: bool = True, timeout_s: float = 60) -> Any:
        sent.append(command)
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=timeout_s)

    monkeypatch.setattr("providers.skypilot.provider.run_ssh", ssh_here)
    cluster = ClusterHandle("orch-aws-g2", "us-east-1", "skypilot", "", {"node_dir": NODE_DIR})
    worker, foreign = sleeper(NODE_DIR), sleeper(None)
    try:
        assert kill_victim(provider, cluster, foreign.pid) == (
            0,
            f"pid {foreign.pid} is not a process of cluster orch-aws-g2 on its head",
        )
        assert alive(foreign)
        assert kill_victim(provider, cluster, worker.pid) == (1, None)
        assert worker.wait(timeout=10) == -signal.SIGKILL
        assert kill_victim(provider, cluster, None) == (0, "the request names no pid")
        assert len(sent) == 2 and all(f"RAY_TMPDIR={NODE_DIR}" in c for c in sent)
    finally:
        for proc in (worker, foreign):
            proc.kill()
            proc.wait()
