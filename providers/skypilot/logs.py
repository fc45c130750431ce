"""A SkyPilot cluster's rank logs brought back before teardown: each node's, packed and
capped on the node (``python -m orchestrator.wire.logfiles pack``) and streamed back
over ssh. Nothing here imports SkyPilot."""

from __future__ import annotations

import shlex
import subprocess

from orchestrator.wire import logfiles
from orchestrator.wire.logfiles import KeptLogs
from providers.base import ClusterHandle
from providers.skypilot.errors import first_line
from providers.skypilot.ssh import remote, ssh_argv
from providers.skypilot.task import DEFAULT_PYTHON

# Fetching a node's logs before teardown: an unreachable node is given up on quickly
# (the teardown waits for it), a reachable one has time to send its capped files.
LOGS_CONNECT_S = 10
LOGS_TIMEOUT_S = 120.0


def fetch_kept(cluster: ClusterHandle, log_dir: str, dest_dir: str) -> KeptLogs:
    """Every node's rank logs under ``log_dir``, written to ``dest_dir``; the nodes it
    could not reach are named in the result's error."""
    parts: dict[int, list[bytes]] = {}
    problems: list[str] = []
    cut = 0
    for node in range(max(1, int(cluster.info.get("num_nodes", 1)))):
        try:
            fetched = _fetch(cluster, log_dir, node)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            problems.append(f"node {node}: {first_line(exc)}")
            continue
        for rank, (data, cut_on_node) in fetched.items():
            parts.setdefault(rank, []).append(data)
            cut += cut_on_node
    # A rank Ray Train restarted on another node wrote on both: its parts in node
    # order, capped as one log when together they are over the cap.
    files: dict[int, bytes] = {}
    for rank, pieces in parts.items():
        files[rank], cut_here = logfiles.capped(b"".join(pieces)) if len(pieces) > 1 else (pieces[0], 0)
        cut += cut_here
    kept = logfiles.write_kept(dest_dir, files, cut)
    if problems:
        return KeptLogs(kept.ranks, kept.bytes, kept.cut, error="; ".join(problems)[:500])
    return kept


def _fetch(cluster: ClusterHandle, log_dir: str, node: int) -> dict[int, tuple[bytes, int]]:
    python = cluster.info.get("python", DEFAULT_PYTHON)
    command = f"{python} -m orchestrator.wire.logfiles pack {shlex.quote(log_dir)}"
    done = subprocess.run(
        ssh_argv(cluster, remote(cluster, command, node), node=node, connect_timeout_s=LOGS_CONNECT_S),
        capture_output=True,
        timeout=LOGS_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        tail = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise OSError(f"ssh exited {done.returncode}: {tail[:200]}")
    return logfiles.unpack(done.stdout)
