"""Which name an attempt's cluster is launched under (orchestrator/control/naming.py)."""

from __future__ import annotations

import pytest

from orchestrator.control.naming import candidate_names, cluster_name, keep_for_restart
from recovery.detection import FailureKind

pytestmark = pytest.mark.unit


def _name(generation: int, owned: tuple[str, ...] = (), in_use: tuple[str, ...] = (), keeps: bool = True) -> str:
    asked: list[str] = []

    def known(name: str) -> bool:
        asked.append(name)
        return name in in_use

    name = cluster_name("run-1", "slurm-a", generation, keeps_runtime=keeps, owned=owned, in_use=known)
    assert keeps or not asked, "a provider that keeps no runtime is never asked"
    return name


def test_a_provider_that_keeps_no_runtime_gets_a_name_per_attempt() -> None:
    assert _name(3, keeps=False) == "run-1-slurm-a-g3"


def test_a_provider_that_keeps_runtimes_gets_the_runs_name_for_the_region_while_it_is_free() -> None:
    assert _name(1) == "run-1-slurm-a"
    # Back in the region after a failover: its cluster was torn down, the name is free again.
    assert _name(5, owned=("run-1-slurm-b",)) == "run-1-slurm-a"


def test_a_name_the_run_still_holds_or_the_provider_still_knows_is_not_adopted() -> None:
    # Its teardown is under way (or failed): a launch under it would adopt what is left.
    assert _name(4, owned=("run-1-slurm-a",)) == "run-1-slurm-a-g4"
    # The journal says it was torn down, but SkyPilot still has a record of it.
    assert _name(4, in_use=("run-1-slurm-a",)) == "run-1-slurm-a-g4"


def test_a_crash_mid_launch_is_looked_for_under_every_name_the_attempt_may_have_had() -> None:
    assert candidate_names("run-1", "slurm-a", 4) == ("run-1-slurm-a", "run-1-slurm-a-g4")


def test_only_a_failure_restarted_in_place_on_a_cluster_up_with_its_runtime_ended_keeps_it() -> None:
    def keep(kind: FailureKind | None, **changes: bool) -> bool:
        facts = {"keeps_runtime": True, "runtime_ended": True, "up": True, **changes}
        return keep_for_restart(kind, **facts)

    assert keep(FailureKind.USER_ERROR) and keep(FailureKind.RUNTIME_LOST)
    assert not keep(FailureKind.CLUSTER_LOST) and not keep(FailureKind.PREEMPTED) and not keep(None)
    assert not keep(FailureKind.USER_ERROR, keeps_runtime=False), "the local provider launches anew"
    assert not keep(FailureKind.RUNTIME_LOST, runtime_ended=False), "a driver that may train is never left"
    assert not keep(FailureKind.USER_ERROR, up=False)
