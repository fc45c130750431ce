"""Hedged provisioning (orchestrator/control/hedge.py), driven look by look with a launch
that records what it did: a hedge starts at a missed heartbeat, is torn down when the
region answers again (also when its launch was still under way), is taken by a failover
to its region, and never launches past its budget."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.control.hedge import HedgeManager
from orchestrator.runstate.event_json import to_json
from orchestrator.runstate.events import Event
from providers.base import ClusterHandle
from recovery.detection import Health, HealthCheck, Observation

pytestmark = pytest.mark.unit


class Proc:
    pid = 4242

    def poll(self) -> int | None:
        return None


class World:
    """The manager's context: a provider that tears down, a journal, a launch that waits
    for ``release`` when told to."""

    def __init__(self, max_launches: int = 1) -> None:
        self.events: list[dict[str, Any]] = []
        self.torn: list[str] = []
        self.launched: list[tuple[str, int]] = []
        # The launches of these generations wait for ``release``.
        self.held: set[int] = set()
        self.release = threading.Event()
        self.notes: list[str] = []
        rec = SimpleNamespace(
            standby=False,
            hedge_max_launches=max_launches,
            hedge_after_s=0.0,
            heartbeat_interval_s=1.0,
            heartbeat_timeout_s=10.0,
            region_cooldown_s=600.0,
            provision_timeout_s=5.0,
        )
        provider = SimpleNamespace(
            teardown=lambda c: self.torn.append(c.name),
            capabilities=frozenset(),
            health=lambda c: HealthCheck(Health.UP, 0.0),
        )
        self.ctx = SimpleNamespace(
            cfg=SimpleNamespace(recovery=rec),
            emit=self.emit,
            provider=provider,
            clock=lambda: 1000.0,
            candidates=["a", "b", "c"],
            progress=SimpleNamespace(note=self.notes.append),
        )
        gens = iter(range(2, 100))
        self.manager = HedgeManager(self.ctx, lambda: next(gens))  # type: ignore[arg-type]
        self.manager.launch = self.launch
        self.manager.start_runtime = lambda cluster, region, gen, standby=False: Proc()

    def emit(self, event: Event) -> Event:
        self.events.append(to_json(event))
        return event

    def launch(self, region: str, gen: int, purpose: str = "attempt") -> ClusterHandle:
        assert purpose == "standby"
        if gen in self.held:
            self.release.wait(5)
        self.launched.append((region, gen))
        return ClusterHandle(name=f"{region}-g{gen}", region=region, provider="fake", address="", info={})

    def kinds(self) -> list[str]:
        return [e["type"] for e in self.events]

    def look(self, age: float | None, noticed: bool = False) -> None:
        self.manager.observe(Observation(None, Health.UP, age, 60.0), noticed)

    def settle(self) -> None:
        thread = self.manager._thread
        if thread is not None:
            thread.join(5)


def test_a_missed_heartbeat_hedges_and_a_fresh_one_tears_the_hedge_down() -> None:
    w = World()
    w.manager.ensure("a")
    w.look(0.3)
    assert w.launched == [] and w.kinds() == []  # nothing until a sign
    w.look(2.9)
    w.settle()
    assert w.launched == [("b", 2)]
    started = [e for e in w.events if e["type"] == "hedge_started"]
    assert started == [
        {**started[0], "region": "b", "from_region": "a", "reason": "no heartbeat for 2.9 s", "launches": 1}
    ]
    assert "standby_ready" in w.kinds()
    w.look(4.0)  # still out: no second launch
    w.look(0.2)
    assert w.torn == ["b-g2"]
    cancelled = [e for e in w.events if e["type"] == "hedge_cancelled"]
    assert cancelled and cancelled[0]["region"] == "b" and "answered again" in cancelled[0]["reason"]
    assert w.kinds().index("hedge_cancelled") < w.kinds().index("teardown")


def test_a_hedge_cancelled_while_still_launching_is_torn_down_when_its_launch_ends() -> None:
    w = World()
    w.held = {2}
    w.manager.ensure("a")
    w.look(3.0)
    w.look(0.2)  # the region answers before the launch is done
    assert "hedge_cancelled" in w.kinds() and w.torn == []
    w.release.set()
    w.settle()
    assert w.launched == [("b", 2)] and w.torn == ["b-g2"]  # nothing left behind
    assert "standby_ready" not in w.kinds()


def test_a_declared_loss_takes_the_hedge_and_the_budget_bounds_the_next() -> None:
    w = World(max_launches=1)
    w.manager.ensure("a")
    w.look(3.0, noticed=False)
    warm = w.manager.take("b")
    assert warm is not None and warm.cluster.name == "b-g2" and w.torn == []
    assert w.manager.out is None
    w.manager.ensure("b")  # the failover runs there now
    w.look(3.0)  # trouble again, the budget spent
    w.settle()
    assert w.launched == [("b", 2)]
    assert w.kinds().count("hedge_started") == 1


def test_a_notice_hedges_at_once_and_a_hedge_left_for_another_region_is_cancelled() -> None:
    w = World(max_launches=3)
    w.manager.ensure("a")
    w.look(0.1, noticed=True)
    w.settle()
    started = [e for e in w.events if e["type"] == "hedge_started"]
    assert started[0]["reason"] == "a preemption notice"
    w.look(0.1, noticed=True)  # a notice is never taken back
    assert "hedge_cancelled" not in w.kinds()
    assert w.manager.take("c") is None  # the failover went elsewhere
    w.manager.ensure("c")
    assert w.torn == ["b-g2"] and "hedge_cancelled" in w.kinds()


def test_the_run_ending_with_a_hedge_out_tears_it_down() -> None:
    w = World()
    w.manager.ensure("a")
    w.look(3.0)
    w.settle()
    w.manager.close()
    assert w.torn == ["b-g2"]
    (cancelled,) = [e for e in w.events if e["type"] == "hedge_cancelled"]
    assert cancelled["reason"] == "the run ended"


def test_a_hedge_cancelled_then_hedged_again_while_its_first_launch_runs_leaves_one_cluster() -> None:
    w = World(max_launches=2)
    w.held = {2}
    w.manager.ensure("a")
    w.look(3.0)  # hedge 1 launching (held)
    w.look(0.2)  # cancelled
    w.look(0.1, noticed=True)  # hedge 2, same region, while hedge 1's launch still runs
    w.settle()  # hedge 2 done
    w.release.set()
    for _ in range(50):
        if len(w.launched) == 2 and w.torn:
            break
        threading.Event().wait(0.1)
    assert sorted(w.launched) == [("b", 2), ("b", 3)]
    assert w.torn == ["b-g2"]  # the first, stale, goes; the second stands
    assert [e["generation"] for e in w.events if e["type"] == "standby_ready"] == [3]
    warm = w.manager.take("b")
    assert warm is not None and warm.cluster.name == "b-g3"
