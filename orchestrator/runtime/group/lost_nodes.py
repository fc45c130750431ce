"""Nodes the controller saw die, acted on before Ray's own health checks do.

The controller learns of a lost node at once (its raylet gone, or a node that stopped
answering), and says so on the control channel (the nodes word). Ray learns of it when
its head's health checks give up, about a second later here and more on a loaded
cluster; until then Ray Train does not see the lost worker (its actor's calls hang),
and a new group could be placed on the dead node. For a group that will go on without
the node (no replacement coming: ``recovery.node_replace_timeout_s=0``, an elastic
world; or none waited for: the nodes left fit the full world, orchestrator/runtime/group/spare_nodes.py),
the driver need not wait for Ray:

1. It finds the lost nodes' Ray ids by asking the spare on every node of the group
   (orchestrator/runtime/group/spares.py): a dead node's spare never answers. Only when every
   node of the group has a spare that answered before, and exactly as many stop
   answering now as the controller lost, are those nodes taken for the lost ones; any
   doubt leaves it to Ray, as before.
2. It ends the group's workers on those nodes (``ray.kill``: Ray marks an actor dead at
   once, wherever it was), so Ray Train sees the loss now. ``lost_nodes_found`` journals
   the controller's lost nodes, the Ray ids taken for them and the ranks ended.
3. The next group's size counts the nodes without them (orchestrator/runtime/group/world.py),
   and its placement excludes them by label (``ray.io/node-id``), so it is placed on the
   nodes that are left while Ray still counts the dead one; a lost worker replaced at the
   same world takes the spare of a node with room instead of its bundle's dead node.

A replacement on its way is left to Ray Train's own replacement, which needs the lost
bundle placed again, which Ray does once it lets the dead node go.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

# How often the driver reads the nodes word (a file here, an object-store GET on a
# cloud's control channel: 5 a second for the run's length).
POLL_S = 0.2
# Ray ids of the nodes known dead (never cleared: a node that comes back is a new id).
_dead: set[str] = set()


def dead() -> frozenset[str]:
    return frozenset(_dead)


def exclude_selector(nodes: frozenset[str]) -> dict[str, str] | None:
    """The label selector that keeps a worker off ``nodes`` (None: no node to keep off). Pure."""
    return {"ray.io/node-id": f"!in({','.join(sorted(nodes))})"} if nodes else None


def identify(lost: int, group_nodes: set[str], ready: set[str], unanswered: set[str]) -> set[str]:
    """The Ray nodes to take for the controller's ``lost`` ones: the group's nodes whose
    spare did not answer, when every node of the group had a spare that answered before
    (``ready``) and exactly ``lost`` of them are silent now; otherwise none. Pure."""
    if lost < 1 or not group_nodes or not group_nodes <= ready:
        return set()
    silent = group_nodes & unanswered
    return silent if len(silent) == lost else set()


def watch(control: Any, generation: int, workers: Callable[[], list[Any]]) -> None:
    """Act on each new nodes word of ``generation`` in the background; ``workers()``: the
    running group's Ray Train workers (none between groups)."""
    threading.Thread(target=_watch, args=(control, generation, workers), name="lost-nodes", daemon=True).start()


def _watch(control: Any, generation: int, workers: Callable[[], list[Any]]) -> None:
    from orchestrator.runtime.group import spares

    seen = 0.0
    while True:
        time.sleep(POLL_S)
        try:
            word = control.read_nodes_word(generation)
            if word is None or word.time <= seen:
                continue
            seen = word.time
            if not word.lost:
                continue
            group = list(workers())
            group_nodes = {str(w.metadata.node_id) for w in group}
            ready, unanswered = spares.ask_ready()
            found = identify(len(word.lost), group_nodes, ready, unanswered)
            if not found:
                continue
            _dead.update(found)
            killed: list[int] = []
            if not word.wait_until:  # a replacement coming is left to Ray Train's replacement
                import ray

                for w in group:
                    if str(w.metadata.node_id) in found:
                        ray.kill(w.actor)
                        killed.append(int(w.distributed_context.world_rank))
            control.event(
                generation, "lost_nodes_found", lost=list(word.lost), nodes=sorted(found), killed_ranks=sorted(killed)
            )
        except Exception:
            continue  # nothing done: Ray's health checks tell, as before
