"""Which worker node a kill_node or hang_node strikes, and when there is none to strike."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator.chaos.processes import choose_node
from orchestrator.wire.faults import NodeRole
from recovery.manifest import Manifest

RUN = "run-1"
WriteCheckpoint = Callable[..., Manifest]
TWO_NODES = "cloud.regions.local-a.nodes=2"


def test_a_named_node_is_struck_and_a_drawn_one_is_the_seeds_draw_among_the_worker_nodes() -> None:
    assert choose_node(2, 0, [1, 2, 3]) == (2, None)
    drawn = {seed: choose_node(None, seed, [3, 1, 2])[0] for seed in range(40)}
    # The same seed, the same node, whatever order the provider lists them in.
    assert drawn == {seed: choose_node(None, seed, [1, 2, 3])[0] for seed in range(40)}
    assert set(drawn.values()) == {1, 2, 3}
    assert choose_node(None, 7, [1]) == (1, None)


def test_a_drawn_node_is_one_that_runs_a_worker_of_the_group_when_that_is_known() -> None:
    # Node 2 runs a worker; 1 and 3 are spare nodes; the head (0) is never drawn.
    assert {choose_node(None, seed, [1, 2, 3], training=[0, 2])[0] for seed in range(40)} == {2}
    assert {choose_node(None, seed, [1, 2, 3], training=[2, 3])[0] for seed in range(40)} == {2, 3}
    # Not known (no train_started yet), or only the head: the draw among all of them.
    assert {choose_node(None, seed, [1, 2, 3], training=[0])[0] for seed in range(40)} == {1, 2, 3}
    assert {choose_node(None, seed, [1, 2, 3], training=[])[0] for seed in range(40)} == {1, 2, 3}
    # A named node is struck whatever runs there.
    assert choose_node(3, 0, [1, 2, 3], training=[2]) == (3, None)


def test_node_role_idle_draws_a_node_that_runs_no_worker_and_none_is_refused() -> None:
    idle = NodeRole.idle
    assert {choose_node(None, seed, [1, 2, 3], [0, 2], idle)[0] for seed in range(40)} == {1, 3}
    # Every rank on the head: every worker node is idle.
    assert {choose_node(None, seed, [1, 2], [0], idle)[0] for seed in range(40)} == {1, 2}
    node, why = choose_node(None, 0, [1, 2], [1, 2, 0], idle)
    assert node is None and why is not None and "no idle node" in why and "cloud.regions.<name>.nodes" in why
    # Three nodes for two workers, placed on both worker nodes: the idle one is the head.
    node, why = choose_node(None, 0, [1, 2], [2, 1], idle)
    assert node is None and why is not None and "the idle one is the head (0)" in why
    node, why = choose_node(None, 0, [1, 2], [], idle)
    assert node is None and why is not None and "not known" in why


@pytest.mark.parametrize(
    ("node", "workers", "why"),
    [
        (None, [], "no worker node"),
        (1, [], "no worker node"),
        (3, [1, 2], "node 3 is not a worker node of the cluster (its worker nodes: 1..2)"),
    ],
)
def test_no_node_to_strike_is_a_reason_not_a_node(node: int | None, workers: list[int], why: str) -> None:
    chosen, problem = choose_node(node, 0, workers)
    assert chosen is None and problem is not None and why in problem


def test_a_graceful_kill_region_on_this_machine_terms_every_process_then_kills_them_after_the_grace(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal
    import threading
    from typing import Any

    import orchestrator.chaos.firing as firing
    import orchestrator.chaos.processes as processes
    from orchestrator.chaos.injector import FaultInjector
    from orchestrator.runstate.events import Event, FaultEnded
    from orchestrator.wire.control import ControlChannel
    from orchestrator.wire.sections import FaultSpec
    from providers.base import Capability, ClusterHandle

    sent: list[tuple[int, int]] = []
    ended = threading.Event()

    def send(pids: list[int], sig: int) -> list[int]:
        sent.extend((pid, sig) for pid in pids)
        return pids

    monkeypatch.setattr(firing, "send_signal", send)
    monkeypatch.setattr(processes, "send_signal", send)

    class Local:
        name = "local"
        capabilities = frozenset({Capability.LOCAL_PROCESSES})

        def processes(self, cluster: ClusterHandle) -> list[int]:
            return [11, 12]

    events: list[Event] = []

    def said(e: Event) -> None:
        events.append(e)
        if isinstance(e, FaultEnded):
            ended.set()

    provider: Any = Local()
    inj = FaultInjector([], ControlChannel(f"file://{tmp_path}/control"), provider, lambda: [], "r", on_event=said)
    spec = FaultSpec.from_plain({"kind": "kill_region", "graceful": True, "grace_s": 0.2}, "fault")
    fired = inj.drill(spec, ClusterHandle("c", "local-a", "local", ""), None, 1, 5)
    assert fired.detail["terminated"] == 2 and fired.detail["graceful"] is True and fired.detail["grace_s"] == 0.2
    assert sent == [(11, signal.SIGTERM), (12, signal.SIGTERM)]
    assert ended.wait(10)
    assert sent[2:] == [(11, signal.SIGKILL), (12, signal.SIGKILL)]
    (end,) = [e for e in events if isinstance(e, FaultEnded)]
    assert (end.kind, end.region, end.reclaimed) == ("kill_region", "local-a", 2)
    inj.close()
