"""Clean-up runs every step even when one fails; a standby whose runtime cannot start
is torn down, not leaked."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.control.cleanup import run_all
from providers.base import Capability

pytestmark = pytest.mark.unit


def test_every_step_runs_and_the_first_error_is_raised() -> None:
    ran: list[str] = []

    def step(name: str, fail: bool = False) -> Any:
        def run() -> None:
            ran.append(name)
            if fail:
                raise RuntimeError(name)

        return run

    with pytest.raises(RuntimeError, match=r"^replicator$"):
        run_all([step("standby"), step("replicator", True), step("teardown", True), step("proxies")])
    assert ran == ["standby", "replicator", "teardown", "proxies"]
    run_all([step("again")])
    assert ran[-1] == "again"


def test_an_interrupt_during_clean_up_still_runs_the_rest() -> None:
    ran: list[str] = []

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_all([interrupted, lambda: ran.append("teardown")])
    assert ran == ["teardown"]


class _Keeper:
    """A provider that keeps a lost cluster's runtime (providers.base.KeepsRuntime)."""

    name = "keeper"
    capabilities = frozenset({Capability.KEEPS_RUNTIME})

    def __init__(self, fail_sweep: bool = False) -> None:
        self.calls: list[tuple[str, object]] = []
        self.fail_sweep = fail_sweep

    def teardown(self, cluster: Any, keep_runtime: bool = False) -> bool:
        self.calls.append(("teardown", keep_runtime))
        return keep_runtime

    def sweep_runtime(self, cluster: Any) -> None:
        self.calls.append(("sweep", cluster.name))
        if self.fail_sweep:
            raise OSError("login node unreachable")


def test_a_provider_that_keeps_runtimes_keeps_them_at_teardown_and_sweeps_them_at_the_end() -> None:
    from orchestrator.control.cleanup import sweep_runtimes, tear_down
    from orchestrator.runstate.events import RuntimeSwept, Teardown
    from providers.base import ClusterHandle

    events: list[Any] = []
    keeper = _Keeper()
    handle = ClusterHandle("r-slurm-a", "slurm-a", "keeper", "h:1", {})
    tear_down(keeper, events.append, handle)  # type: ignore[arg-type]
    assert keeper.calls == [("teardown", True)]
    assert isinstance(events[-1], Teardown) and events[-1].runtime_kept is True
    sweep_runtimes(keeper, events.append, {"r-slurm-a": handle})  # type: ignore[arg-type]
    assert events[-1] == RuntimeSwept(ts=events[-1].ts, cluster="r-slurm-a")
    failing = _Keeper(fail_sweep=True)
    sweep_runtimes(failing, events.append, {"r-slurm-a": handle})  # type: ignore[arg-type]
    assert events[-1].error == "OSError: login node unreachable", "journaled, never raised"


def test_a_provider_without_kept_runtimes_is_torn_down_as_before() -> None:
    from orchestrator.control.cleanup import tear_down
    from providers.base import ClusterHandle

    class Plain:
        name = "plain"
        capabilities: frozenset[Capability] = frozenset()

        def teardown(self, cluster: Any) -> None:
            self.down = cluster.name

    events: list[Any] = []
    plain = Plain()
    tear_down(plain, events.append, ClusterHandle("r-a-g1", "a", "plain", "h:1", {}))  # type: ignore[arg-type]
    assert plain.down == "r-a-g1" and events[-1].runtime_kept is None
