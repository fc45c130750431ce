"""A standby pool's side in each run (orchestrator/control/pool.py), two runs sharing a
folder as their control store: one launches, the other joins, the one that loses its
region takes the standby, the other launches the next, and the last to leave tears it
down; forged records are passed over."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.control.pool import PooledStandby, PoolStore, pool_refusal
from orchestrator.runstate.event_json import to_json
from orchestrator.runstate.events import Event
from providers.base import Capability, ClusterHandle, ProvisionError, ProvisionErrorKind
from recovery.detection import Health, HealthCheck
from recovery.pool import GONE, LAUNCHING, READY, TAKEN, Entry, pool_key

pytestmark = pytest.mark.unit

KEY = pool_key(b"c" * 32, "team")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Provider:
    name = "local"
    capabilities = frozenset({Capability.SHARED_CLUSTERS, Capability.LOCAL_PROCESSES})

    def __init__(self) -> None:
        self.up: set[str] = set()
        self.torn: list[str] = []
        self.launched = 0
        self.lock = threading.Lock()

    def health(self, cluster: ClusterHandle) -> HealthCheck:
        return HealthCheck(Health.UP if cluster.name in self.up else Health.GONE, 0.0)

    def teardown(self, cluster: ClusterHandle) -> None:
        self.torn.append(cluster.name)
        self.up.discard(cluster.name)


class Run:
    def __init__(self, run_id: str, root: Path, provider: Provider, clock: Clock, fail: bool = False) -> None:
        self.events: list[dict[str, Any]] = []
        cfg = SimpleNamespace(
            recovery=SimpleNamespace(provision_timeout_s=1.0, controller_lease_s=30.0, region_cooldown_s=600.0)
        )
        ctx = SimpleNamespace(cfg=cfg, candidates=["a", "b"], clock=clock, emit=self.emit, provider=provider)
        self.store = PoolStore(f"file://{root}", None, "team", KEY, run_id, on_invalid=self.invalid)
        self.gens = iter(range(2, 100))
        self.pool = PooledStandby(ctx, self.store, lambda: next(self.gens))  # type: ignore[arg-type]
        self.invalids: list[tuple[str, str]] = []

        def launch(region: str, gen: int, purpose: str) -> ClusterHandle:
            assert purpose == "pool"
            if fail:
                raise ProvisionError(ProvisionErrorKind.NO_CAPACITY, region, "no capacity")
            with provider.lock:
                provider.launched += 1
            name = f"{run_id}-{region}-g{gen}"
            provider.up.add(name)
            return ClusterHandle(name, region, "local", "127.0.0.1:1", {"base_dir": "/tmp/x"})

        self.pool.launch = launch

    def emit(self, event: Event) -> Event:
        self.events.append(to_json(event))
        return event

    def invalid(self, path: str, why: str) -> None:
        self.invalids.append((path, why))

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == type_]

    def settle(self) -> None:
        launcher = self.pool._launcher
        if launcher is not None:
            launcher.join(timeout=10)


def tick(clock: Clock, seconds: float, *runs: Run) -> None:
    """Time passing with each run's watch ticking (memberships renewed)."""
    for _ in range(int(seconds // 2)):
        clock.now += 2
        for run in runs:
            run.pool.check()
            run.settle()


def _states(store: PoolStore, region: str = "b") -> list[str]:
    return [e.state for e in store.entries(region)[0]]


def test_two_runs_share_one_standby_the_loser_takes_it_the_pool_refills_and_each_pays_its_share(tmp_path: Path) -> None:
    provider, clock = Provider(), Clock()
    r1, r2 = Run("r1", tmp_path, provider, clock), Run("r2", tmp_path, provider, clock)
    r1.pool.ensure("a")  # r1 runs in a: its failover would go to b
    r1.settle()
    assert _states(r1.store) == [LAUNCHING, READY] and provider.launched == 1
    tick(clock, 10, r1)
    r2.pool.ensure("a")
    r2.settle()
    assert provider.launched == 1, "the second run joins the standby up, it launches none"
    assert r2.of("pool_joined") and not r2.of("pool_launched")

    tick(clock, 30, r1, r2)  # both covered for 30 s: 10 s r1 alone, then 30 s shared
    warm = r1.pool.take("b")
    assert warm is not None and warm.proc is None and warm.pool == "team" and warm.cluster.name == "r1-b-g2"
    assert _states(r1.store)[-1] == TAKEN
    [share] = r1.of("pool_share")
    assert share["share_s"] == pytest.approx(10 + 15) and share["runs"] == 2
    assert r1.of("pool_taken")[0]["generation"] == 3

    clock.now += 5
    r2.pool.check()  # r2 sees it taken: pays its share, launches the next
    r2.settle()
    [share2] = r2.of("pool_share")
    assert share2["share_s"] == pytest.approx(15) and share2["cluster"] == "r1-b-g2"
    assert _states(r2.store)[-2:] == [LAUNCHING, READY] and provider.launched == 2
    assert r2.of("pool_launched")[-1]["cluster"] == "r2-b-g2"
    # Together the two shares are the standby's whole idle time (launch to take).
    assert share["share_s"] + share2["share_s"] == pytest.approx(40)

    tick(clock, 20, r2)
    r2.pool.close()  # the last run waiting: the standby goes
    assert _states(r2.store)[-1] == GONE and provider.torn == ["r2-b-g2"]
    assert r2.of("pool_share")[-1]["share_s"] == pytest.approx(20)
    assert [e["purpose"] for e in r2.of("teardown")] == ["pool"]


def test_a_run_that_leaves_while_another_waits_leaves_the_standby_up(tmp_path: Path) -> None:
    provider, clock = Provider(), Clock()
    r1, r2 = Run("r1", tmp_path, provider, clock), Run("r2", tmp_path, provider, clock)
    r1.pool.ensure("a")
    r1.settle()
    r2.pool.ensure("a")
    clock.now += 10
    r1.pool.close()
    assert provider.torn == [] and _states(r1.store)[-1] == READY
    clock.now += 10
    r2.pool.close()
    assert provider.torn == ["r1-b-g2"]


def test_a_lost_standby_is_dropped_and_launched_anew(tmp_path: Path) -> None:
    provider, clock = Provider(), Clock()
    r1 = Run("r1", tmp_path, provider, clock)
    r1.pool.ensure("a")
    r1.settle()
    provider.up.clear()  # its cluster died
    clock.now += 5
    r1.pool.check()
    r1.settle()
    assert _states(r1.store)[-3:] == [GONE, LAUNCHING, READY] and provider.torn == ["r1-b-g2"]
    assert r1.pool.take("b") is not None


def test_a_lost_standby_is_not_taken(tmp_path: Path) -> None:
    provider, clock = Provider(), Clock()
    r1 = Run("r1", tmp_path, provider, clock)
    r1.pool.ensure("a")
    r1.settle()
    provider.up.clear()
    assert r1.pool.take("b") is None
    taken = r1.of("pool_taken")[-1]
    assert taken["taken"] is False and taken["reason"] == "lost"
    assert _states(r1.store)[-1] == GONE and provider.torn == ["r1-b-g2"]


def test_a_failed_launch_is_journaled_and_marks_the_region_gone(tmp_path: Path) -> None:
    provider, clock = Provider(), Clock()
    r1 = Run("r1", tmp_path, provider, clock, fail=True)
    r1.pool.ensure("a")
    r1.settle()
    assert _states(r1.store) == [LAUNCHING, GONE]
    assert "no capacity" in r1.of("pool_launched")[0]["error"]
    assert r1.pool.take("b") is None


def test_a_local_standby_of_another_machine_is_neither_taken_nor_ended_here(tmp_path: Path) -> None:
    provider, clock = Provider(), Clock()
    r1 = Run("r1", tmp_path, provider, clock)
    # A teammate's machine launched it: its pid and port mean nothing on this one.
    r1.store.append("b", 0, Entry(0, READY, "r9", clock.now, cluster=_cluster("theirs"), host="elsewhere"))
    assert r1.pool.take("b") is None
    r1.pool.ensure("a")
    tick(clock, 4, r1)
    r1.pool.close()
    assert _states(r1.store) == [READY] and provider.torn == [] and provider.launched == 0


def test_only_one_of_two_writers_of_the_same_entry_wins(tmp_path: Path) -> None:
    store = PoolStore(f"file://{tmp_path}", None, "team", KEY, "r1")
    first = store.append("b", 0, Entry(0, LAUNCHING, "r1", 1.0, expires_at=9.0))
    second = store.append("b", 0, Entry(0, LAUNCHING, "r2", 1.0, expires_at=9.0))
    assert first is not None and first.seq == 1 and second is None


def test_records_not_sealed_with_the_pool_s_key_are_passed_over_and_said_once(tmp_path: Path) -> None:
    provider, clock = Provider(), Clock()
    r1 = Run("r1", tmp_path, provider, clock)
    log = tmp_path / "_pools" / "team" / "b" / "log"
    log.mkdir(parents=True)
    # A store writer without the control key: a ready standby pointing at its own cluster.
    forged = {"seq": 1, "state": READY, "run_id": "x", "at": 1.0, "cluster": {**_cluster("evil"), "info": {}}}
    (log / "e1").write_text(json.dumps(forged))
    other = PoolStore(f"file://{tmp_path}", None, "team", pool_key(b"d" * 32, "team"), "x")
    other.append("b", 1, Entry(0, READY, "x", 1.0, cluster=_cluster("evil2")))
    members = tmp_path / "_pools" / "team" / "b" / "members"
    members.mkdir()
    (members / "x.json").write_text(json.dumps({"run_id": "x", "intervals": [[0, None]], "expires_at": 1e10}))
    assert r1.pool.take("b") is None, "nothing that verifies is ready: nothing taken"
    r1.pool.ensure("a")
    r1.settle()
    entries, top = r1.store.entries("b")
    assert [e.state for e in entries] == [LAUNCHING, READY] and top == 4 and provider.launched == 1
    assert {path for path, _ in r1.invalids} == {"b/log/e1", "b/log/e2", "b/members/x.json"}
    assert all("pool's key" in why for _, why in r1.invalids)
    r1.pool.check()
    assert len(r1.invalids) == 3, "each said once"


def test_a_pool_is_refused_where_clusters_cannot_pass_between_runs_or_without_the_control_key() -> None:
    cfg = SimpleNamespace(
        recovery=SimpleNamespace(standby_pool="team"), cloud=SimpleNamespace(control_key="env:ORCH_KEY")
    )
    sky = SimpleNamespace(name="skypilot", capabilities=frozenset({Capability.TOKEN_KEY}))
    refused = pool_refusal(cfg, sky, b"k" * 32)  # type: ignore[arg-type]
    assert refused is not None and refused.startswith("recovery.standby_pool: provider 'skypilot'")
    refused = pool_refusal(cfg, Provider(), None)  # type: ignore[arg-type]
    assert refused is not None and "env:ORCH_KEY gives none" in refused
    assert pool_refusal(cfg, Provider(), b"k" * 32) is None  # type: ignore[arg-type]


def _cluster(name: str) -> dict[str, Any]:
    return {"name": name, "region": "b", "provider": "local", "address": "127.0.0.1:9"}
