"""A controller's acts pass its lease's guard: the provider's changes of a cluster do, its
reads do not; a guard that does not return stops the act before it happens."""

from __future__ import annotations

import pytest

from orchestrator.control.controlstate import GuardedProvider, run_root

pytestmark = pytest.mark.unit


class Provider:
    name = "fake"
    local_processes = True

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
    assert guarded_calls == [1] and p.name == "fake" and p.local_processes


def test_a_guard_that_stands_down_stops_the_act() -> None:
    inner = Provider()

    def lost() -> None:
        raise StoodDown

    with pytest.raises(StoodDown):
        GuardedProvider(inner, lost).teardown("c")
    assert inner.calls == []


def test_the_runs_folder_in_the_control_store() -> None:
    assert run_root("s3://b/control/", "r-1") == "s3://b/control/r-1"
