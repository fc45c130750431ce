"""Watching the worker nodes of an attempt's cluster: a lost node is replaced in place.

Each look asks the provider how the worker nodes are (``Provider.nodes``); a node that
is gone, or not UP for ``recovery.health_failures_to_lose`` looks in a row, is lost
(``recovery.detection.node_lost``). The region goes on: the controller tells the
runtime (the control channel's nodes word) how many workers the nodes left fit and,
while a replacement is on its way (``recovery.node_replace_timeout_s``), to wait for
it, so the worker group restarts at its full world and the run stays exact. A region
whose nodes left still fit the full world (a spare node, idle capacity) is not told
to wait: the group restarts there at once, and the replacement becomes the spare node.
A node not replaced in time leaves the run to the workers that fit, down to
``trainer.min_workers``; below that the attempt fails (``node_lost``) and the run
fails over.

Replacements run in threads of their own (a provider may take seconds); what they
learn is journaled by the watch's own loop, the one that emits everything else.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from orchestrator.control.context import RunContext
from orchestrator.control.progress import node_lost_text, node_not_replaced_text, node_replaced_text
from orchestrator.runstate.events import NodeLost, NodeReplaced, NodeReplaceFailed
from providers.base import ClusterHandle
from recovery.detection import Health, node_lost
from recovery.elastic import capacity, min_world, world_size

# A replacement finishing as an attempt ends well is let finish (its journal line would
# be lost); one under way when the attempt failed is not: the failover must not wait.
CLOSE_WAIT_S = 1.0


@dataclass
class Loss:
    node: int
    at: float  # detected
    health: str
    world_before: int | None
    replacing: bool
    started: float = 0.0  # the replacement's start (time.time)
    replace_s: float | None = None  # set once replaced
    error: str | None = None  # set once the replacement failed
    journaled: bool = False  # its replacement's outcome
    recorded: bool = False  # its incident (the worker group's restart)
    last_step: int | None = None  # the newest step known done when it was detected


class NodeWatch:
    """One attempt's worker nodes; ``poll`` from the watch's loop, ``close`` at its end."""

    def __init__(self, ctx: RunContext, cluster: ClusterHandle, region: str, generation: int) -> None:
        self.ctx, self.cluster, self.region, self.gen = ctx, cluster, region, generation
        rc = ctx.cfg.cloud.regions[region]
        trainer = ctx.cfg.trainer
        self.count = rc.node_count()
        self.per_node = capacity(1, rc.num_cpus, rc.num_gpus, trainer.cpus_per_worker, trainer.gpus_per_worker)
        self.workers, self.min_workers = trainer.workers, trainer.min_workers
        self.failures_to_lose = ctx.cfg.recovery.health_failures_to_lose
        self.wait_s = ctx.cfg.recovery.node_replace_timeout_s
        self.streaks: dict[int, int] = {}
        self.losses: dict[int, Loss] = {}
        self.threads: list[threading.Thread] = []
        self.world: int | None = None  # the world the attempt trains with (train_started)
        # The nodes its ranks run on (train_started's worker_nodes; None: not known).
        self.world_nodes: frozenset[int] | None = None
        self.short: str | None = None  # why the region can no longer train

    # --- what the region fits ------------------------------------------------------
    def missing(self) -> list[int]:
        return sorted(n for n, loss in self.losses.items() if loss.replace_s is None)

    def fits(self) -> int:
        return (self.count - len(self.missing())) * self.per_node

    def spare_node(self) -> bool:
        """The nodes left still fit the full world: a lost node's workers move to the
        spare nodes at once, and its replacement (still started) becomes the next
        spare node rather than something the group waits for."""
        return self.fits() >= self.workers

    def _word(self) -> None:
        now = time.time()
        coming = [
            loss.started + self.wait_s
            for loss in self.losses.values()
            if loss.replacing and loss.replace_s is None and loss.error is None
        ]
        wait_until = max(coming) if coming and not self.spare_node() else 0.0
        self.ctx.control.nodes_word(self.gen, self.fits(), wait_until if wait_until > now else 0.0, self.missing())
        if wait_until <= now and world_size(self.fits(), self.workers, self.min_workers) is None:
            self.short = (
                f"node(s) {self.missing()} lost and not replaced: {self.fits()} worker(s) fit, fewer than "
                f"{min_world(self.workers, self.min_workers)} (trainer.min_workers)"
            )

    # --- the loop ------------------------------------------------------------------
    def poll(self, last_step: int | None = None) -> list[Loss]:
        """Look at the nodes; ``last_step``: the newest step known done now (a loss found
        here keeps it, so its incident's lost steps are counted from there). The losses
        found by this look."""
        if self.count <= 1:
            return []
        self._journal_replacements()
        try:
            checks = self.ctx.provider.nodes(self.cluster)
        except Exception as exc:  # a look that fails says nothing of one node
            self.ctx.progress.note(f"looking at the nodes of {self.region}: {type(exc).__name__}: {exc}"[:300])
            return []
        found = []
        for check in checks:
            if check.index <= 0 or (check.index in self.losses and self.losses[check.index].replace_s is None):
                continue
            streak = 0 if check.health is Health.UP else self.streaks.get(check.index, 0) + 1
            self.streaks[check.index] = streak
            if node_lost(check.health, streak, self.failures_to_lose):
                found.append(self._lose(check.index, str(check.health), check.detail, last_step))
        return found

    def held_workers(self, node: int) -> bool | None:
        """Whether a rank of the group runs on ``node``, as the last ``train_started``
        said; None when not known (unlabelled nodes), or while another loss's restart
        is still to come (the group being placed again may be there now)."""
        if self.world_nodes is None or self.unrecorded() is not None:
            return None
        return node in self.world_nodes

    def _lose(self, node: int, health: str, detail: str, last_step: int | None = None) -> Loss:
        replacing = self.wait_s > 0
        held = self.held_workers(node)
        # A node that ran no worker restarts nothing: no incident is owed (recorded), and
        # the next restart (another fault's) is not taken for this loss's.
        loss = Loss(
            node,
            time.time(),
            health,
            self.world,
            replacing,
            started=time.time(),
            last_step=last_step,
            recorded=held is False,
        )
        self.losses[node] = loss
        self.streaks[node] = 0
        self._word()
        self.ctx.emit(
            NodeLost(
                region=self.region,
                generation=self.gen,
                node=node,
                health=health,
                detail=detail or None,
                fits=self.fits(),
                world_size=self.world,
                replacing=replacing,
                held_workers=held,
            )
        )
        self.ctx.progress.note(
            node_lost_text(node, self.region, health, replacing, held, self.wait_s, goes_on=self.spare_node())
        )
        target = self._replace if replacing else self._drop
        t = threading.Thread(target=target, args=(loss,), name=f"node-{node}-{target.__name__[1:]}", daemon=True)
        t.start()
        self.threads.append(t)
        return loss

    def _replace(self, loss: Loss) -> None:
        try:
            self.ctx.provider.replace_node(self.cluster, loss.node, self.wait_s)
        except Exception as exc:
            loss.error = str(exc)[:500] or type(exc).__name__
        else:
            loss.replace_s = round(time.time() - loss.started, 3)

    def _drop(self, loss: Loss) -> None:
        # Not replaced: what is left of it still goes (a hung node must not wake up).
        try:
            self.ctx.provider.drop_node(self.cluster, loss.node)
        except Exception:  # nothing to journal: the node is lost either way
            pass

    def _journal_replacements(self, tell: bool = True) -> None:
        """Journal each replacement's outcome once; ``tell``: the runtime hears of it too
        (the nodes word), while the attempt runs."""
        changed = False
        for loss in self.losses.values():
            if loss.journaled or (loss.replace_s is None and loss.error is None):
                continue
            loss.journaled, changed = True, True
            if loss.replace_s is not None:
                self.ctx.emit(
                    NodeReplaced(region=self.region, generation=self.gen, node=loss.node, replace_s=loss.replace_s)
                )
                self.ctx.progress.note(node_replaced_text(loss.node, self.region, loss.replace_s))
            else:
                self.ctx.emit(
                    NodeReplaceFailed(
                        region=self.region,
                        generation=self.gen,
                        node=loss.node,
                        error=str(loss.error),
                        fits=self.fits(),
                    )
                )
                self.ctx.progress.note(node_not_replaced_text(loss.node, self.region, str(loss.error)))
        if not tell:
            return
        if changed:
            self._word()
        elif self.short is None and any(
            loss.replacing and loss.replace_s is None and time.time() > loss.started + self.wait_s + 5.0
            for loss in self.losses.values()
        ):
            self._word()  # a provider that overran its deadline: the region is judged on what is left

    def unrecorded(self) -> Loss | None:
        """The oldest loss whose worker-group restart has no incident yet."""
        pending = [loss for loss in self.losses.values() if not loss.recorded]
        return min(pending, key=lambda loss: loss.at) if pending else None

    def close(self, failed: bool = False) -> None:
        """The attempt ended: a replacement still under way is given CLOSE_WAIT_S to
        finish, none when the attempt ``failed`` (a region lost takes its nodes along, and
        one seen first is being replaced in a cluster that is gone). The provider's
        teardown ends it (a node it started then is killed, never recorded:
        ``Provider.replace_node``)."""
        for t in self.threads:
            t.join(timeout=0.0 if failed else CLOSE_WAIT_S)
        if not failed:
            # One that finished meanwhile (a spare node's, the group never waited for it)
            # is journaled: the region's next spare node is there.
            self._journal_replacements(tell=False)
