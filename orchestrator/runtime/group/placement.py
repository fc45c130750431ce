"""A worker group's placement group, kept across the group's restart.

Ray Train restarts a worker group whole to resize it (an elastic group going on
without a lost node) and, outside survivor mode, after a lost worker: it removes the
group's placement group, then asks for a new one on the same CPUs. Ray frees a removed
group's CPUs and places the new one on them 0.15-0.9 s later (measured here, with or
without a node lost; a group on free resources is placed in milliseconds). So a placement group
removed for a restart is kept instead (``keeping``), and the next group takes its
bundles (``reusable``), with no wait, when it is of the same size and every one of
them lies on a live node.
Otherwise it is removed and a new one asked for, as before: a kept group with a
bundle on a dead node is one Ray places again once it declares the node dead, and
Ray 2.60's placement service then retries that bundle without pause (a core of the
head at 100% for as long as the group runs, found in an elastic run). So an elastic
group that shrinks still waits for its new placement group; a group restarted at its
size (a lost worker outside survivor mode: ``job.train_func``, FSDP, GPUs) does not.

A group kept and then not taken is removed by the next start, and by Ray when the
driver's job ends; a group shut down for good (the run's end, a failed start) is
removed at once, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class Kept:
    pg: Any  # ray.util.placement_group.PlacementGroup
    resources: dict[str, float]  # per bundle
    strategy: str


# At most one group kept (the driver runs one worker group at a time).
_kept: list[Kept] = []
# True while the controller shuts a group down to start the next one.
_keeping: list[bool] = [False]
# Journals a kept group taken (the driver's control channel): ``placement_reused``.
_journal: list[Callable[..., None]] = []


def enable(journal: Callable[..., None]) -> None:
    """``journal(**fields)``: where each kept group taken is told (``placement_reused``)."""
    _journal[:] = [journal]


def reusable(bundle_nodes: dict[int, str | None], live: set[str], want: int) -> list[int] | None:
    """Every bundle index, when there are ``want`` and each lies on a node in ``live``;
    None otherwise (a group of another size would leave CPUs reserved, or lack some)."""
    if want <= 0 or len(bundle_nodes) != want:
        return None
    if any(node is None or node not in live for node in bundle_nodes.values()):
        return None
    return sorted(bundle_nodes)


@contextmanager
def keeping() -> Iterator[None]:
    """Within it, a group's placement group released is kept for the next start."""
    _keeping[0] = True
    try:
        yield
    finally:
        _keeping[0] = False


def release(pg: Any, resources: dict[str, float], strategy: str) -> None:
    """A group is done with ``pg``: kept while ``keeping``, removed otherwise."""
    if _keeping[0]:
        drop()
        _kept.append(Kept(pg, dict(resources), strategy))
        return
    _remove(pg)


def drop() -> None:
    """Remove the group kept, if any."""
    while _kept:
        try:
            _remove(_kept.pop().pg)
        except Exception:
            pass  # gone already (its job's end, a cluster lost)


def take(resources: dict[str, float], strategy: str, want: int, dead: frozenset[str]) -> tuple[Any, list[int]] | None:
    """The kept group and its bundle indices (all of them, as many as ``want``), or None:
    nothing kept, or bundles of another shape, number or node (then it is removed)."""
    if not _kept:
        return None
    kept = _kept[-1]
    indices = None
    if kept.resources == dict(resources) and kept.strategy == strategy:
        try:
            indices = reusable(_bundle_nodes(kept.pg), _live_nodes() - dead, want)
        except Exception:
            indices = None
    if indices is None:
        drop()
        return None
    _kept.pop()
    try:
        if _journal:
            _journal[0](workers=want, bundles=indices)
    except Exception:
        pass  # the journal line is lost; the group starts all the same
    return kept.pg, indices


def _remove(pg: Any) -> None:
    from ray.util.placement_group import remove_placement_group

    remove_placement_group(pg)


def _bundle_nodes(pg: Any) -> dict[int, str | None]:
    from ray.util.placement_group import placement_group_table

    table = placement_group_table(pg)
    if table.get("state") not in ("CREATED", "RESCHEDULING"):
        return {}
    return {int(i): (str(n) if n else None) for i, n in (table.get("bundles_to_node_id") or {}).items()}


def _live_nodes() -> set[str]:
    import ray

    return {str(n["NodeID"]) for n in ray.nodes() if n.get("Alive")}
