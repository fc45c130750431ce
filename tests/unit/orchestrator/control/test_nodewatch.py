"""The controller's watch on worker nodes: lost, replaced, not replaced, too few left."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.compose import compose
from orchestrator.control.context import RunContext
from orchestrator.control.nodewatch import NodeWatch
from orchestrator.runstate.events import Event, NodeLost, NodeReplaced, NodeReplaceFailed
from orchestrator.wire.control import ControlChannel
from providers.base import ClusterHandle, NodeCheck, ProvisionError, ProvisionErrorKind
from recovery.detection import Health

pytestmark = pytest.mark.unit

TWO_NODES = ["cloud.regions.local-a.nodes=2", "cloud.regions.local-a.num_cpus=1"]


class Nodes:
    """A provider's node answers, and a replacement that succeeds, fails or waits."""

    def __init__(self, replace: str = "ok") -> None:
        self.health = {1: Health.UP}
        self.replace = replace
        self.release = threading.Event()
        self.replaced: list[int] = []
        self.dropped: list[int] = []

    def drop_node(self, cluster: ClusterHandle, index: int) -> None:
        self.dropped.append(index)

    def nodes(self, cluster: ClusterHandle) -> list[NodeCheck]:
        return [NodeCheck(i, h) for i, h in self.health.items()]

    def replace_node(self, cluster: ClusterHandle, index: int, timeout_s: float) -> None:
        if self.replace == "wait":
            self.release.wait(5)
        if self.replace == "fail":
            raise ProvisionError(ProvisionErrorKind.TIMEOUT, cluster.region, f"node {index} not up after {timeout_s}s")
        self.replaced.append(index)
        self.health[index] = Health.UP


def watch(tmp_path: Path, provider: Nodes, *overrides: str) -> tuple[NodeWatch, list[Event], ControlChannel]:
    cfg = compose([*TWO_NODES, *overrides])
    events: list[Event] = []
    control = ControlChannel(f"file://{tmp_path}/control", {})
    ctx = RunContext(
        run_id="r",
        run_dir=str(tmp_path),
        cfg=cfg,
        provider=provider,  # type: ignore[arg-type]
        control=control,
        emit=events.append,
    )
    nw = NodeWatch(ctx, ClusterHandle("c", "local-a", "local", "127.0.0.1:1"), "local-a", 1)
    nw.world = 2
    return nw, events, control


def settle(nw: NodeWatch) -> None:
    for t in nw.threads:
        t.join(5)
    nw.poll()


def of(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def test_a_gone_node_is_replaced_while_the_runtime_is_told_to_wait(tmp_path: Path) -> None:
    provider = Nodes(replace="wait")
    nw, events, control = watch(tmp_path, provider)
    nw.poll()
    assert not events
    provider.health[1] = Health.GONE
    nw.poll()
    (lost,) = of(events, NodeLost)
    assert (lost.node, lost.health, lost.fits, lost.world_size, lost.replacing) == (1, "gone", 1, 2, True)
    word = control.read_nodes_word(1)
    assert word is not None and word.fits == 1 and word.lost == (1,) and word.wait_until > time.time()
    provider.release.set()
    settle(nw)
    (replaced,) = of(events, NodeReplaced)
    assert replaced.node == 1 and replaced.replace_s >= 0
    word = control.read_nodes_word(1)
    assert word is not None and (word.fits, word.wait_until, word.lost) == (2, 0.0, ())
    assert nw.short is None
    loss = nw.unrecorded()
    assert loss is not None and loss.node == 1 and loss.replace_s is not None


def test_a_region_that_still_fits_its_world_is_not_told_to_wait(tmp_path: Path) -> None:
    # Three nodes of one CPU for two workers: the node left idle is the spare node.
    provider = Nodes(replace="wait")
    provider.health[2] = Health.UP
    nw, events, control = watch(tmp_path, provider, "cloud.regions.local-a.nodes=3")
    assert nw.spare_node()
    provider.health[1] = Health.GONE
    nw.poll()
    (lost,) = of(events, NodeLost)
    assert (lost.fits, lost.replacing) == (2, True)
    word = control.read_nodes_word(1)
    assert word is not None and (word.fits, word.wait_until, word.lost) == (2, 0.0, (1,))
    assert nw.short is None
    provider.release.set()
    settle(nw)
    assert provider.replaced == [1] and of(events, NodeReplaced)
    # Both of the others lost: one worker fits, and the next replacement is waited for.
    provider.release.clear()
    provider.health[1] = provider.health[2] = Health.GONE
    nw.poll()
    assert not nw.spare_node()
    word = control.read_nodes_word(1)
    assert word is not None and word.fits == 1 and word.wait_until > time.time()
    provider.release.set()
    settle(nw)


def test_a_hung_node_is_lost_after_failures_to_lose_looks(tmp_path: Path) -> None:
    provider = Nodes()
    nw, events, _ = watch(tmp_path, provider, "recovery.health_failures_to_lose=3")
    provider.health[1] = Health.NOT_UP
    nw.poll()
    nw.poll()
    assert not of(events, NodeLost)
    nw.poll()
    assert [e.health for e in of(events, NodeLost)] == ["not_up"]
    settle(nw)
    assert provider.replaced == [1]


def test_not_replaced_the_run_goes_on_with_what_fits_or_the_region_is_short(tmp_path: Path) -> None:
    provider = Nodes(replace="fail")
    nw, events, control = watch(tmp_path, provider, "trainer.min_workers=1")
    provider.health[1] = Health.GONE
    nw.poll()
    settle(nw)
    (failed,) = of(events, NodeReplaceFailed)
    assert "not up after" in failed.error and failed.fits == 1
    word = control.read_nodes_word(1)
    assert word is not None and (word.fits, word.wait_until) == (1, 0.0)
    assert nw.short is None  # one worker fits, trainer.min_workers=1
    # The same loss with min_workers at its default (2): the region can no longer train.
    nw, events, _ = watch(tmp_path / "fixed", Nodes(replace="fail"))
    nw.ctx.provider.health[1] = Health.GONE  # type: ignore[attr-defined]
    nw.poll()
    settle(nw)
    assert nw.short is not None and "fewer than 2 (trainer.min_workers)" in nw.short


def test_no_replacement_wanted_tells_the_runtime_at_once(tmp_path: Path) -> None:
    provider = Nodes()
    nw, events, control = watch(tmp_path, provider, "recovery.node_replace_timeout_s=0", "trainer.min_workers=1")
    provider.health[1] = Health.GONE
    nw.poll()
    assert [e.replacing for e in of(events, NodeLost)] == [False]
    settle(nw)
    # Not replaced, but what is left of it is killed all the same (a hung node stays down).
    assert provider.replaced == [] and provider.dropped == [1]
    assert not of(events, NodeReplaceFailed) and not of(events, NodeReplaced)
    word = control.read_nodes_word(1)
    assert word is not None and (word.fits, word.wait_until) == (1, 0.0)


def test_a_one_node_region_has_no_node_watch(tmp_path: Path) -> None:
    provider = Nodes()
    nw, events, _ = watch(tmp_path, provider, "cloud.regions.local-a.nodes=1", "cloud.regions.local-a.num_cpus=2")
    provider.health[1] = Health.GONE
    nw.poll()
    assert not events


def test_a_loss_keeps_the_step_known_when_it_was_found(tmp_path: Path) -> None:
    # The incident is recorded only when the worker group restarts, by which time the
    # watch's own count may have moved on (a later fault's step): the loss keeps its own.
    provider = Nodes(replace="wait")
    nw, _, _ = watch(tmp_path, provider)
    provider.health[1] = Health.GONE
    nw.poll(last_step=160)
    provider.release.set()
    for t in nw.threads:
        t.join(5)
    nw.poll(last_step=260)
    loss = nw.unrecorded()
    assert loss is not None and loss.last_step == 160


def test_an_attempt_that_failed_does_not_wait_for_a_replacement_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A region lost takes its nodes along; a node seen lost first is being replaced in a
    cluster that is gone, and the failover must not wait for it. An attempt that ends
    well lets a replacement under way finish."""
    from orchestrator.control import nodewatch

    monkeypatch.setattr(nodewatch, "CLOSE_WAIT_S", 30.0)
    provider = Nodes(replace="wait")  # a replacement that ends once released (at most 5 s)
    nw, _events, _control = watch(tmp_path, provider)
    nw.poll()
    provider.health[1] = Health.GONE
    nw.poll()
    (replacing,) = nw.threads
    nw.close(failed=True)
    assert replacing.is_alive(), "a failed attempt waited for the replacement"
    word = _control.read_nodes_word(1)
    provider.release.set()
    nw.close()
    assert not replacing.is_alive() and provider.replaced == [1]
    # The replacement that finished while the attempt ended well is journaled (a spare
    # node region's group never waited for it), with no word to the runtime, which is gone.
    (replaced,) = of(_events, NodeReplaced)
    assert replaced.node == 1
    assert _control.read_nodes_word(1) == word


def test_a_lost_node_that_ran_no_worker_owes_no_restart(tmp_path: Path) -> None:
    # Three nodes for two workers, the ranks on the head and node 1 (train_started's
    # worker_nodes): node 2 is the idle spare node.
    provider = Nodes(replace="wait")
    provider.health[2] = Health.UP
    nw, events, _ = watch(tmp_path, provider, "cloud.regions.local-a.nodes=3")
    nw.world_nodes = frozenset({0, 1})
    provider.health[2] = Health.GONE
    (idle,) = nw.poll()
    (lost,) = of(events, NodeLost)
    assert (lost.node, lost.held_workers) == (2, False)
    # Nothing restarts for it: the next restart of the group is another fault's.
    assert idle.recorded and nw.unrecorded() is None
    provider.health[1] = Health.GONE
    (busy,) = nw.poll()
    assert of(events, NodeLost)[1].held_workers is True and nw.unrecorded() is busy
    provider.release.set()
    settle(nw)


def test_where_the_ranks_run_unknown_or_a_restart_owed_a_loss_waits_for_its_restart(tmp_path: Path) -> None:
    provider = Nodes(replace="wait")
    provider.health[2] = Health.UP
    nw, events, _ = watch(tmp_path, provider, "cloud.regions.local-a.nodes=3")
    assert nw.world_nodes is None  # unlabelled nodes, or no train_started yet
    provider.health[2] = Health.GONE
    (first,) = nw.poll()
    assert of(events, NodeLost)[0].held_workers is None and not first.recorded
    # Known now, but the first loss's restart is still to come: the group being placed
    # again may run on the node lost next.
    nw.world_nodes = frozenset({0, 1})
    provider.health[1] = Health.GONE
    (second,) = nw.poll()
    assert of(events, NodeLost)[1].held_workers is None and not second.recorded
    provider.release.set()
    settle(nw)
