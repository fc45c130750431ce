"""How many workers a worker group starts with, in a region that may have lost a node.

Ray Train asks its scaling policy for a world size whenever the worker group is not
running: at the start and after each failure. This answers with ``decide_world``
(recovery/elastic.py) from two sources: the workers the cluster's live nodes fit, as
Ray sees them, and the controller's word on the region's nodes (a node it saw die,
before Ray's own health checks have; a replacement on its way). While a replacement
is coming the answer is to wait, and the exact run goes on at its full world; past the
controller's deadline it is whatever fits, down to ``trainer.min_workers``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from orchestrator.runtime.group import lost_nodes
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.spec import RuntimeSpec
from recovery.elastic import decide_world, min_world, node_workers

# After a failure in a multi-node region, how long the group waits for the controller's
# word before it believes Ray's view alone: Ray learns of a dead node seconds after the
# controller does, and a group placed on it would wait for a node that never answers.
# Not waited for when the lost workers' nodes are vouched for (``WorldPolicy.vouched``).
WORD_SETTLE_S = 1.0
# How often a waiting policy looks again (the controller's word on the control channel,
# Ray's node table): a group waits for a node at most this long after it is there.
WAIT_POLL_S = 0.1
# How long Ray's node table may lag the controller's word before it is believed anyway.
RAY_LAG_S = 30.0
# No world fits this long after the controller's deadline: give up (the driver exits
# and the controller fails the region over), rather than wait for ever.
GIVE_UP_AFTER_S = 120.0


def live_nodes(cpus_per_worker: float, gpus_per_worker: float, dead: frozenset[str] = frozenset()) -> tuple[int, int]:
    """Workers the cluster's live nodes fit, and how many nodes are live, from Ray's node
    table, less the nodes the driver knows dead before Ray does (orchestrator/runtime/group/lost_nodes.py)."""
    import ray

    total = alive = 0
    for node in ray.nodes():
        if node.get("Alive") and str(node.get("NodeID")) not in dead:
            alive += 1
            res = node.get("Resources", {})
            total += node_workers(res.get("CPU", 0.0), res.get("GPU", 0.0), cpus_per_worker, gpus_per_worker)
    return total, alive


class WorldPolicy:
    """``decide()``: the world for the next worker group, or None to wait (and ask again)."""

    def __init__(
        self,
        spec: RuntimeSpec,
        control: ControlChannel,
        nodes: Callable[[], tuple[int, int]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spec = spec
        self.control = control
        trainer = spec.trainer
        self.nodes = nodes or (lambda: live_nodes(trainer.cpus_per_worker, trainer.gpus_per_worker, lost_nodes.dead()))
        self.clock = clock
        self.starts = 0  # worker groups started so far
        self.started_at = 0.0  # when the last one was
        self.asked_at: float | None = None  # when this (re)start began asking
        self.said_waiting: str | None = None
        # Set by the driver for a restart: True when every node that held a lost worker
        # answered just now (its spare did, orchestrator/runtime/group/spares.py). A lost
        # worker on a live node is no lost node: nothing to wait for.
        self.vouched: Callable[[], bool] | None = None

    def decide(self) -> int | None:
        now = self.clock()
        if self.asked_at is None:
            self.asked_at = now
        word = self.control.read_nodes_word(self.spec.generation)
        restart = self.starts > 0
        # A word written since the last group started speaks of what that group met.
        if restart and self.spec.nodes > 1 and (word is None or word.time < self.started_at):
            if now < self.asked_at + WORD_SETTLE_S and not self._vouched():
                return None  # a node may have died that Ray still counts
        trainer = self.spec.trainer
        fits, alive = self.nodes()
        if word is not None and alive > self.spec.nodes - len(word.lost) and now < word.time + RAY_LAG_S:
            # Ray still counts a node the controller saw die: a group placed now could be
            # given its CPUs, and would wait for it until Ray lets it go.
            self._say(f"Ray still counts {alive} live nodes, {len(word.lost)} of them lost", fits, word)
            return None
        world = decide_world(
            fits,
            None if word is None else word.fits,
            0.0 if word is None else word.wait_until,
            now,
            trainer.workers,
            trainer.min_workers,
        )
        if world is None:
            self._waiting(fits, word, now)
            return None
        self.starts += 1
        self.started_at = now
        self.asked_at, self.said_waiting = None, None
        return world

    def _vouched(self) -> bool:
        try:
            return self.vouched is not None and bool(self.vouched())
        except Exception:
            return False  # cannot tell: wait as for a node that may be gone

    def _waiting(self, fits: int, word: Any, now: float) -> None:
        trainer = self.spec.trainer
        least = min_world(trainer.workers, trainer.min_workers)
        if word is not None and now < word.wait_until:
            why = f"a replacement for node(s) {list(word.lost)} is on its way"
        else:
            why = f"{fits} worker(s) fit, fewer than {least} (trainer.min_workers)"
            if self.asked_at is not None and now - max(self.asked_at, 0.0 if word is None else word.wait_until) > (
                GIVE_UP_AFTER_S
            ):
                raise RuntimeError(f"no worker group can start: {why}, for {GIVE_UP_AFTER_S:g}s")
        self._say(why, fits, word)

    def _say(self, why: str, fits: int, word: Any) -> None:
        if why != self.said_waiting:
            self.said_waiting = why
            until = None if word is None or not word.wait_until else round(word.wait_until, 3)
            self.control.event(self.spec.generation, "world_waiting", reason=why, fits=fits, wait_until=until)
