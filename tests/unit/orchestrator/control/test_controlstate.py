"""A controller's acts pass its lease's guard: the provider's changes of a cluster do, its
reads do not; a guard that does not return stops the act before it happens."""

from __future__ import annotations

import pytest

from orchestrator.control.controlstate import GuardedProvider, run_root

pytestmark = pytest.mark.unit


class Provider:
    name = "fake"
    capabilities = frozenset({"local_processes"})

    def __init__(self) -> None:
        self.calls: list[str] = []

    def launch(self, *a: object) -> str:
        self.calls.append("launch")
        return "handle"

    def teardown(self, cluster: object) -> None:
        self.calls.append("teardown")

    def health(self, cluster: object) -> str:
        self.calls.append("health")
        return "UP"


class StoodDown(Exception):
    pass


def test_changes_pass_the_guard_and_reads_do_not() -> None:
    inner, guarded_calls = Provider(), []
    p = GuardedProvider(inner, lambda: guarded_calls.append(1))
    assert p.launch("r") == "handle" and p.health("c") == "UP"
    assert guarded_calls == [1] and p.name == "fake" and p.capabilities == {"local_processes"}


def test_a_guard_that_stands_down_stops_the_act() -> None:
    inner = Provider()

    def lost() -> None:
        raise StoodDown

    with pytest.raises(StoodDown):
        GuardedProvider(inner, lost).teardown("c")
    assert inner.calls == []


def test_the_runs_folder_in_the_control_store() -> None:
    assert run_root("s3://b/control/", "r-1") == "s3://b/control/r-1"


def test_what_stood_in_place_of_the_lease_is_journaled_once_per_reason_at_the_next_act(tmp_path: object) -> None:
    from pathlib import Path
    from types import SimpleNamespace

    from orchestrator.control.controlstate import ControlState
    from orchestrator.runstate.events import ClaimIgnored, LeaseIgnored

    root = Path(str(tmp_path))
    claims = root / "ctl" / "r1" / "claims"
    claims.mkdir(parents=True)
    (claims / "c1").write_text("{}")
    cfg = SimpleNamespace(
        cloud=SimpleNamespace(control_store=f"file://{root}/ctl", control_options={}),
        recovery=SimpleNamespace(heartbeat_interval_s=1.0, controller_lease_s=30.0),
    )
    state = ControlState(cfg, "r1", str(root / "run"), b"k" * 32)
    taken = state.take()
    assert taken.controller == 2
    assert state.claim_notes() == [ClaimIgnored(name="c1", reason="is not a claim")]
    said: list[object] = []
    state.emit = said.append
    for _ in range(3):
        (root / "ctl" / "r1" / "lease.json").write_text("{}")
        state.lease.confirmed_until = 0.0  # the next act reads the lease again
        state.guard()
    assert said == [LeaseIgnored(controller=2, reason="lease.json is not a lease")]
    state.close()
