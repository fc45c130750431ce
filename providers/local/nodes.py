"""The worker nodes of a multi-node local cluster (``cloud.regions.<r>.nodes`` > 1).

Each worker node is ``ray start --address=<the head's GCS> --block`` in a session of
its own, bound to 127.0.0.1, with its own ports and its own temp dir (Ray takes
``--temp-dir`` per node: a worker node's sockets, logs and spilled objects stay in
it, so one node's files never mix with another's on this one machine). Its processes
carry the cluster's marker and the node's index (``NODE_MARKER``): Ray's workers
inherit them from the node's raylet, Ray's agents (which overwrite their environment)
keep the node's session, so ``node_processes`` finds them all.

What is recorded of a node (``cluster.info["nodes"]``, one dict per worker node) is
enough for a controller that did not start it: ``pid`` and ``started`` (its ``ray
start``, whose pid is its session's id), ``raylet`` and ``raylet_started`` (the raylet's pid and start
time, checked cheaply by ``node_check``), ``log`` and ``dir``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psutil

from orchestrator.wire.schema import NODE_LABEL
from providers.base import NodeCheck
from recovery.detection import Health

# The head's GCS tells a node that stopped answering is dead after about
# failure_threshold health checks, one every period_ms, each given timeout_ms: Ray's
# defaults (3 s, 10 s, 5) take 15 s for a killed node and about a minute for a hung
# one, which a run that lost a node would wait out: its worker group is not placed
# again until Ray has let the dead node go. With these, on the 2-core machine: an idle
# node SIGKILLed was dead to Ray 3.7 s after the kill (its first check failed about
# 2.9 s after it, whatever the period; then one failure every period_ms), one running
# a training worker about a second after (the elastic run of benchmarks/node_loss.py
# recovers in 1.7-2.3 s; in 3.2-3.6 s with checks every 0.5 s), and a SIGSTOPped one
# 11.3 s after: a raylet that does not answer for 1.5 s at each of five checks (a
# loaded machine) is not taken for dead. Not every 0.1 s: the elastic run recovered in
# 1.3-1.7 s then, but a replacement node took 2.4 s to come up instead of 1.0 s (three
# runs each; the cause is Ray's). Set on the head of a multi-node cluster only
# (ray_config_def.h's names, read by gcs_server from its environment).
NODE_HEALTH_ENV = {
    "RAY_health_check_period_ms": "200",
    "RAY_health_check_timeout_ms": "1500",
    "RAY_health_check_failure_threshold": "5",
}

# A node started to replace a lost one: the group waits for it, its survivors idle. Its
# raylet's idle worker process (one per CPU, started as it comes up) imports torch and
# the training loop meanwhile, so the spare that the driver starts there at once
# (orchestrator/runtime/group/spares.py) is handed a process that has them. Not on the nodes
# a cluster starts with: there that work competes for the cores with the driver's start.
REPLACEMENT_ENV = {
    "RAY_preload_python_modules": "torch,torch._dynamo,orchestrator.runtime.loop.train_loop",
}

# Each node's own listening ports (the head's as well): two nodes on one machine must
# not both take Ray's defaults.
NODE_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--metrics-export-port",
    "--runtime-env-agent-port",
)


def worker_argv(
    gcs_address: str,
    num_cpus: int,
    num_gpus: int,
    object_store_bytes: int,
    temp_dir: str,
    ports: dict[str, int],
    index: int,
) -> list[str]:
    """``ray start`` for worker node ``index`` joining the head at ``gcs_address``."""
    return [
        sys.executable,
        "-m",
        "providers.raystart",  # Ray's own `ray`, without its Serve import
        "start",
        "--join-on-loopback",  # providers.raystart's own
        f"--address={gcs_address}",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={num_cpus}",
        f"--num-gpus={num_gpus}",
        f"--object-store-memory={object_store_bytes}",
        node_label(index),
        # As the head's: nobody reads the streamed logs (each rank writes its own file).
        "--include-log-monitor=false",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
        *(f"{k}={v}" for k, v in ports.items()),
    ]


def node_label(index: int) -> str:
    """The ``ray start`` flag that labels a node with its index (NODE_LABEL): the ranks
    journal where they run, and the controller tells a lost idle node from a worker's."""
    return f"--labels={NODE_LABEL}={index}"


def find_raylet(session: int) -> tuple[int, float] | None:
    """The raylet of the node whose ``ray start`` ran as ``session``: (pid, start time)."""
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] == "raylet" and os.getsid(proc.pid) == session:
                return proc.pid, proc.create_time()
        except (psutil.Error, OSError):
            continue
    return None


def node_check(rec: dict[str, Any], start: subprocess.Popen[bytes] | None) -> NodeCheck:
    """One worker node's health from its record: GONE when its ``ray start --block``
    exited (``start``: the process, where this controller started it) or its raylet is
    gone, NOT_UP when its raylet is stopped (SIGSTOP), UP otherwise. Two system calls:
    the controller asks every 0.2 s."""
    index = int(rec["index"])
    pid = int(rec["pid"])
    if start is not None:
        code = start.poll()
        if code is not None:
            return NodeCheck(index, Health.GONE, f"its ray start exited ({code})")
    elif not _alive(pid, rec.get("started")):
        return NodeCheck(index, Health.GONE, f"its ray start (pid {pid}) is gone")
    if "raylet" not in rec:
        return NodeCheck(index, Health.NOT_UP, "starting")
    raylet = rec["raylet"]
    if raylet is None:
        return NodeCheck(index, Health.UP, "its raylet was not found when it came up")
    try:
        status = _status(int(raylet), rec.get("raylet_started"))
    except psutil.Error:
        return NodeCheck(index, Health.GONE, f"its raylet (pid {raylet}) is gone")
    if status == psutil.STATUS_ZOMBIE:
        return NodeCheck(index, Health.GONE, f"its raylet (pid {raylet}) is gone")
    if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
        return NodeCheck(index, Health.NOT_UP, f"its raylet (pid {raylet}) is stopped")
    return NodeCheck(index, Health.UP)


def _status(pid: int, started: float | None) -> str:
    proc = psutil.Process(pid)
    # A pid reused by another process since is the raylet gone.
    if started is not None and abs(proc.create_time() - float(started)) > 0.05:
        raise psutil.NoSuchProcess(pid)
    return str(proc.status())


def _alive(pid: int, started: float | None) -> bool:
    try:
        return _status(pid, started) != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
