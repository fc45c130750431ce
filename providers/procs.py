"""Finding and ending a cluster's processes by the marker in their environment.

Ray starts workers in sessions of their own, so a process group does not hold a
cluster; the environment variable every process inherits does. A worker node of a
local cluster also carries its index (``NODE_MARKER``), so that one node's
processes, its workers included, can be told from the rest of its cluster's.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import psutil

MARKER = "ORCHESTRATOR_CLUSTER"
NODE_MARKER = "ORCHESTRATOR_NODE"


def marked(cluster: str, sessions: frozenset[int] = frozenset()) -> list[int]:
    """Processes of a cluster: by the marker, or by a session we started it in.

    Ray's agents overwrite their environment with their process title
    (setproctitle), so the marker alone misses them; they keep the session.
    """
    return _scan(lambda env: env.get(MARKER) == cluster, sessions)


def node_marked(cluster: str, index: int, sessions: frozenset[int] = frozenset()) -> list[int]:
    """Processes of worker node ``index`` of a cluster: by both markers, or by the
    node's own session (``sessions``: the pids its ``ray start`` ran as)."""
    node = str(index)
    return _scan(lambda env: env.get(MARKER) == cluster and env.get(NODE_MARKER) == node, sessions)


def _scan(match: Callable[[dict[str, str]], bool], sessions: frozenset[int]) -> list[int]:
    me = os.getpid()
    out = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if (sessions and os.getsid(proc.pid) in sessions) or match(proc.environ()):
                # A zombie is dead already: only its parent can reap it, and that parent may
                # be a stopped controller (controller_freeze). Asked of a match alone: this
                # scan runs in kill loops, over every process of the machine.
                if proc.status() != psutil.STATUS_ZOMBIE:
                    out.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return out


def kill_all(cluster: str, sessions: frozenset[int] = frozenset(), timeout_s: float = 15.0) -> list[int]:
    """SIGKILL every process of the cluster until none is left; the pids that were killed."""
    return kill_until_gone(lambda: marked(cluster, sessions), f"cluster {cluster}", timeout_s)


def kill_until_gone(find: Callable[[], list[int]], what: str, timeout_s: float = 15.0) -> list[int]:
    """SIGKILL what ``find`` lists until it lists nothing (a raylet may spawn a worker
    between a scan and its kill); the pids that were killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while True:
        pids = find()
        if not pids:
            return killed
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        _reap(pids)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes of {what} survive SIGKILL: {pids}")
        time.sleep(0.1)


def _reap(pids: list[int]) -> None:
    # Our own children stay as zombies (still "marked") until waited for.
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
