"""Spare nodes: a region's room for workers beyond the group's, where a lost worker
moves at once.

A region with more nodes than its workers fill (``cloud.regions.<r>.nodes`` above what
``trainer.workers`` needs, or nodes with room to spare) holds that room idle. Each node
with room for a worker holds a spare (orchestrator/runtime/group/spares.py), so a lost node's
worker is handed the spare on a node with room rather than wait for the lost node's
replacement to come up, import torch and build its spare (seconds; on a cloud, minutes).
The controller does not tell the group to wait while the nodes left fit the full world
(orchestrator/control/nodewatch.py); the replacement, still started, becomes the
region's next spare node.

The lost worker's bundle is the one whose node died: Ray places it again only once its
health checks let the node go. The spare trains outside the placement group meanwhile,
on a node where the group's reservations leave a worker's resources free, as every
spare does in the lost worker's place. Pure, but for ``live_nodes``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from recovery.elastic import node_workers


def workers_fit(total: Mapping[str, float], resources: Mapping[str, float]) -> int:
    """How many workers of ``resources`` (a worker's CPUs and GPUs) a node of ``total``
    resources fits (``recovery.elastic.node_workers``); one that asks for nothing, once."""
    cpus, gpus = float(resources.get("CPU", 0.0)), float(resources.get("GPU", 0.0))
    if cpus <= 0 and gpus <= 0:
        return 1
    return node_workers(float(total.get("CPU", 0.0)), float(total.get("GPU", 0.0)), cpus, gpus)


def room(
    nodes: Mapping[str, Mapping[str, float]],
    resources: Mapping[str, float],
    busy: Iterable[str],
    dead: frozenset[str] = frozenset(),
) -> dict[str, int]:
    """Each live node's room for workers beyond the group's: ``nodes``, its live nodes'
    total resources by id; ``busy``, the node of each worker the group keeps (one entry
    per worker); ``dead``, nodes known lost while Ray still counts them. Nodes without
    room are left out."""
    held = Counter(busy)
    free = {node: workers_fit(total, resources) - held[node] for node, total in nodes.items() if node not in dead}
    return {node: n for node, n in free.items() if n > 0}


def pick(free: dict[str, int], spares: Iterable[str], ready: Iterable[str]) -> str | None:
    """The node whose spare takes a lost worker's place: one with room and a spare, a
    ready spare (its imports done) before one still importing, then by id; its room is
    taken (``free`` is updated). None when no node with room holds a spare."""
    ready_set = set(ready)
    choices = sorted((node not in ready_set, node) for node in spares if free.get(node, 0) > 0)
    if not choices:
        return None
    node = choices[0][1]
    free[node] -= 1
    return node


def fitting(nodes: Mapping[str, Mapping[str, float]], resources: Mapping[str, float]) -> list[str]:
    """The nodes that fit one worker: each holds a spare, the group's and the spare nodes'."""
    return sorted(node for node, total in nodes.items() if workers_fit(total, resources) >= 1)


def live_nodes() -> dict[str, dict[str, float]]:
    """Ray's live nodes and their total resources, by node id."""
    import ray

    out: dict[str, dict[str, float]] = {}
    for n in ray.nodes():
        if n.get("Alive"):
            res: Any = n.get("Resources") or {}
            out[str(n["NodeID"])] = {str(k): float(v) for k, v in res.items()}
    return out
