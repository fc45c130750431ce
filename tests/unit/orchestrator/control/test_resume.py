"""sweep_and_adopt(): what a resumed controller adopts and what it tears down."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.control.context import RunContext
from orchestrator.control.resume import sweep_and_adopt
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.replay import OpenAttempt, Replayed
from orchestrator.wire.control import ControlChannel
from providers.base import ClusterHandle
from recovery.detection import Health, HealthCheck

DEAD_PID = 2**22 + 12345  # above the default pid_max: never a live process


class Provider:
    name = "fake"
    capabilities: frozenset[str] = frozenset()

    def __init__(self, health: Health = Health.UP, records: dict[str, ClusterHandle] | None = None) -> None:
        self._health = health
        self.records = records or {}
        self.torn_down: list[str] = []

    def health(self, cluster: ClusterHandle) -> HealthCheck:
        return HealthCheck(self._health, 1.0)

    def find(self, name: str) -> ClusterHandle | None:
        return self.records.get(name)

    def teardown(self, cluster: ClusterHandle) -> None:
        self.torn_down.append(cluster.name)


def _ctl(tmp_path: Path, provider: Provider) -> RunContext:
    journal = Journal(str(tmp_path / "journal.jsonl"))
    return RunContext(
        run_id="r",
        run_dir=str(tmp_path),
        cfg=None,  # type: ignore[arg-type]
        provider=provider,  # type: ignore[arg-type]
        control=ControlChannel(f"file://{tmp_path}/control"),
        emit=journal.emit,
    )


def _provisioned(name: str) -> dict:
    return {"cluster": name, "region": "local-a", "address": "127.0.0.1:1", "info": {}}


def _replayed(pid: int) -> Replayed:
    rp = Replayed(generation=2)
    rp.open_attempt = OpenAttempt(2, "local-a", cluster=_provisioned("r-local-a-g2"), runtime_pid=pid)
    rp.leftover = {"r-local-a-g2": _provisioned("r-local-a-g2"), "r-local-b-g1": _provisioned("r-local-b-g1")}
    return rp


def test_a_live_attempt_is_adopted_and_everything_else_torn_down(tmp_path: Path) -> None:
    provider = Provider()
    adopted = sweep_and_adopt(_ctl(tmp_path, provider), _replayed(os.getpid()))
    assert adopted is not None and (adopted.generation, adopted.cluster.name) == (2, "r-local-a-g2")
    assert provider.torn_down == ["r-local-b-g1"]


def test_a_live_attempt_on_a_cluster_whose_check_fails_once_is_adopted_one_gone_for_sure_is_not(
    tmp_path: Path,
) -> None:
    # A check that is not UP is a glitch to the watch that adopts it, not a reason to end it.
    glitch = Provider(Health.NOT_UP)
    assert sweep_and_adopt(_ctl(tmp_path / "a", glitch), _replayed(os.getpid())) is not None
    gone = Provider(Health.GONE)
    assert sweep_and_adopt(_ctl(tmp_path / "b", gone), _replayed(os.getpid())) is None
    assert sorted(gone.torn_down) == ["r-local-a-g2", "r-local-b-g1"]


def test_an_attempt_that_ended_with_a_word_is_adopted_for_its_outcome(tmp_path: Path) -> None:
    provider = Provider(Health.GONE)
    ctl = _ctl(tmp_path, provider)
    ctl.control.exited(2, 0)
    adopted = sweep_and_adopt(ctl, _replayed(DEAD_PID))
    assert adopted is not None and adopted.pid == DEAD_PID


def test_a_silent_dead_attempt_is_torn_down_like_the_rest(tmp_path: Path) -> None:
    provider = Provider()
    assert sweep_and_adopt(_ctl(tmp_path, provider), _replayed(DEAD_PID)) is None
    assert sorted(provider.torn_down) == ["r-local-a-g2", "r-local-b-g1"]
    journal = Journal(str(tmp_path / "journal.jsonl")).events()
    assert all(e["type"] == "teardown" and e["reason"] for e in journal)


def test_a_cluster_launched_but_never_journaled_is_found_by_the_provider_and_torn_down(tmp_path: Path) -> None:
    handle = ClusterHandle("r-local-c-g3", "local-c", "fake", "127.0.0.1:2", {"head_pid": 1})
    provider = Provider(records={"r-local-c-g3": handle})
    rp = Replayed(generation=3, launching=[("local-c", 3), ("local-a", 4)])
    assert sweep_and_adopt(_ctl(tmp_path, provider), rp) is None
    assert provider.torn_down == ["r-local-c-g3"]


def test_a_crash_mid_launch_under_the_runs_region_name_is_found_and_torn_down(tmp_path: Path) -> None:
    # A provider that keeps runtimes names the attempt after the run and region alone.
    handle = ClusterHandle("r-local-c", "local-c", "fake", "127.0.0.1:2", {"head_pid": 1})
    provider = Provider(records={"r-local-c": handle})
    rp = Replayed(generation=3, launching=[("local-c", 3)])
    assert sweep_and_adopt(_ctl(tmp_path, provider), rp) is None
    assert provider.torn_down == ["r-local-c"]
