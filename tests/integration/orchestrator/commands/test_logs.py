"""The ranks' logs: their names, the cap of a kept copy, the tar stream a node's files
travel in (and what it refuses), a worker's descriptors pointed at its rank's file, the
providers' copies before teardown (a lost cluster's said, never raised), and
``action=logs``: which attempt and rank, what each missing one says, following a run.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.logfiles import KeptLogs
from providers.base import ClusterHandle
from providers.skypilot.provider import SkyPilotProvider
from recovery.detection import Health, HealthCheck
from tests.support.paths import REPO

pytestmark = pytest.mark.integration

_WORKER = """
import logging, os, sys
from orchestrator.runtime.loop.rank_log import capture

print("before capture")
path = capture(sys.argv[1], 1, 3)
print("a print", flush=False)
logging.getLogger("user").info("a logging line")
sys.stdout.write("a bare write\\n")
os.write(2, b"straight to fd 2\\n")
os._exit(0)  # no flush at exit: a process killed mid-run
"""


def test_a_worker_sends_all_its_output_to_its_ranks_file_from_capture_on(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _WORKER, str(log_dir)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "before capture\n"
    text = (log_dir / "rank-1.log").read_text()
    assert text.startswith("--- orchestrator: attempt 3, rank 1, pid ")
    for line in ("a print", "user: a logging line", "a bare write", "straight to fd 2"):
        assert line in text, text
    assert (log_dir / "rank-1.log").stat().st_mode & 0o777 == 0o600


NODE_DIR = "/tmp/osky-logtest"


def _sky(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int, refuse: int | None = None) -> Any:
    """A SkyPilot provider whose ssh runs here with bash: node i's disk is tmp_path/node<i>
    (the command's log folder rewritten to it); ``refuse``: a node ssh cannot reach."""
    provider = SkyPilotProvider({}, out=io.StringIO())
    sent: list[tuple[int, str]] = []

    def remote(handle: ClusterHandle, command: str, node: int = 0) -> str:
        return f"cd {REPO}; {command.replace(NODE_DIR, str(tmp_path / f'node{node}'))}"

    def ssh_argv(handle: ClusterHandle, command: str, node: int = 0, connect_timeout_s: int = 0) -> list[str]:
        sent.append((node, command))
        assert connect_timeout_s > 0, "an unreachable node must not hold the teardown for minutes"
        if node == refuse:
            return ["bash", "-c", "echo 'ssh: connect to host: Connection timed out' >&2; exit 255"]
        return ["bash", "-c", command]

    monkeypatch.setattr("providers.skypilot.logs.remote", remote)
    monkeypatch.setattr("providers.skypilot.logs.ssh_argv", ssh_argv)
    cluster = ClusterHandle(
        "r-aws-g2",
        "us-east-1",
        "skypilot",
        "127.0.0.1:1",
        {"sky_cluster": "r-aws-g2", "log_dir": f"{NODE_DIR}/logs", "num_nodes": nodes, "python": sys.executable},
    )
    for n in range(nodes):
        (tmp_path / f"node{n}" / "logs").mkdir(parents=True)
    return provider, cluster, sent


def test_skypilot_fetches_every_nodes_rank_files_through_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provider, cluster, sent = _sky(tmp_path, monkeypatch, nodes=2)
    (tmp_path / "node0" / "logs" / "rank-0.log").write_text("zero on the head\n")
    (tmp_path / "node0" / "logs" / "rank-1.log").write_text("one, before its restart\n")
    (tmp_path / "node1" / "logs" / "rank-1.log").write_text("one, restarted on node 1\n")
    kept = provider.keep_logs(cluster, str(tmp_path / "g2"))
    assert (kept.ranks, kept.error) == ((0, 1), None)
    assert [n for n, _ in sent] == [0, 1] and all("-m orchestrator.wire.logfiles pack" in c for _, c in sent)
    assert (tmp_path / "g2" / "rank-1.log").read_text() == "one, before its restart\none, restarted on node 1\n"


def test_skypilot_keeps_what_it_reaches_and_says_which_node_it_did_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, cluster, _ = _sky(tmp_path, monkeypatch, nodes=2, refuse=1)
    (tmp_path / "node0" / "logs" / "rank-0.log").write_text("zero\n")
    kept = provider.keep_logs(cluster, str(tmp_path / "g2"))
    assert kept.ranks == (0,) and kept.error == "node 1: ssh exited 255: ssh: connect to host: Connection timed out"


def test_skypilot_asks_nothing_of_a_cluster_it_saw_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provider, cluster, sent = _sky(tmp_path, monkeypatch, nodes=1)
    (tmp_path / "node0" / "logs" / "rank-0.log").write_text("zero\n")
    # Seen UP (as launch() leaves it) or not up for a moment: asked.
    for health in (Health.UP, Health.NOT_UP):
        provider._health[cluster.name] = HealthCheck(health, 0.0, "launched")
        assert provider.keep_logs(cluster, str(tmp_path / health.name)).ranks == (0,)
    sent.clear()
    provider._health[cluster.name] = HealthCheck(Health.GONE, 0.0, "sky.status: no record")
    kept = provider.keep_logs(cluster, str(tmp_path / "g2"))
    assert kept == KeptLogs(error="cluster r-aws-g2 was lost; its nodes' logs went with it") and not sent
