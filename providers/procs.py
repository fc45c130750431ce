"""Finding and ending a cluster's processes by the marker in their environment.

Ray starts workers in sessions of their own, so a process group does not hold a
cluster; the environment variable every process inherits does.
"""

from __future__ import annotations

import os
import signal
import time

import psutil

MARKER = "ORCHESTRATOR_CLUSTER"


def marked(cluster: str, sessions: frozenset[int] = frozenset()) -> list[int]:
    """Processes of a cluster: by the marker, or by a session we started it in.

    Ray's agents overwrite their environment with their process title
    (setproctitle), so the marker alone misses them; they keep the session.
    """
    me = os.getpid()
    out = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if sessions and os.getsid(proc.pid) in sessions:
                out.append(proc.pid)
                continue
            if proc.environ().get(MARKER) == cluster:
                out.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return out


def kill_all(cluster: str, sessions: frozenset[int] = frozenset(), timeout_s: float = 15.0) -> list[int]:
    """SIGKILL every process of the cluster until none is left; the pids that were killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while True:
        pids = marked(cluster, sessions)
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
            raise RuntimeError(f"processes of cluster {cluster} survive SIGKILL: {pids}")
        time.sleep(0.1)


def _reap(pids: list[int]) -> None:
    # Our own children stay as zombies (still "marked") until waited for.
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
