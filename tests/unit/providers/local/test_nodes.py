"""A local cluster's worker nodes (providers/local/nodes.py): their ``ray start`` and their health
from their records, read from this machine's process table (no node started here)."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

from providers.local.nodes import node_check, node_label, worker_argv
from recovery.detection import Health

pytestmark = pytest.mark.unit

ME = os.getpid()
STARTED = psutil.Process(ME).create_time()
NO_PID = 2**22 + 1  # above Linux's largest pid


def test_a_worker_node_joins_the_head_on_loopback_through_raystart() -> None:
    argv = worker_argv("127.0.0.1:6379", 2, 0, 10**8, "/tmp/ray", {"--min-worker-port": 1, "--max-worker-port": 2}, 3)
    assert argv[:5] == [sys.executable, "-m", "providers.raystart", "start", "--join-on-loopback"]
    assert "--address=127.0.0.1:6379" in argv and "--node-ip-address=127.0.0.1" in argv
    # The ranks read where they run from it (worker_nodes in train_started).
    assert "--labels=orchestrator/node=3" in argv and node_label(0) == "--labels=orchestrator/node=0"
    assert argv[-2:] == ["--min-worker-port=1", "--max-worker-port=2"]


def test_a_node_whose_ray_start_is_gone_is_gone() -> None:
    check = node_check({"index": 2, "pid": NO_PID}, None)
    assert (check.index, check.health) == (2, Health.GONE)


def test_a_node_without_its_raylet_yet_is_starting_and_one_found_up_is_up() -> None:
    assert node_check({"index": 1, "pid": ME, "started": STARTED}, None).health == Health.NOT_UP
    assert node_check({"index": 1, "pid": ME, "raylet": None}, None).health == Health.UP
    assert node_check({"index": 1, "pid": ME, "raylet": ME, "raylet_started": STARTED}, None).health == Health.UP


def test_a_raylet_gone_or_its_pid_reused_is_gone() -> None:
    assert node_check({"index": 1, "pid": ME, "raylet": NO_PID}, None).health == Health.GONE
    reused = node_check({"index": 1, "pid": ME, "raylet": ME, "raylet_started": STARTED - 100}, None)
    assert reused.health == Health.GONE and f"pid {ME}" in reused.detail
