"""The spare workers' switch and their preload (the hand-over itself runs on real Ray:
tests/chaos/test_survivors.py)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from orchestrator.runtime.group import spares

pytestmark = pytest.mark.unit


def test_spares_are_off_until_the_driver_enables_them() -> None:
    saved = list(spares._workload)
    try:
        spares._workload.clear()
        assert not spares.enabled()
        spares.enable("digits", lambda since: True)
        assert spares.enabled()
    finally:
        spares._workload[:] = saved


def test_a_preload_imports_the_loop_and_the_workload_builds_and_steps_an_optimizer_and_never_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    stepped: list[bool] = []

    class SGD(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            stepped.append(True)
            return super().step(closure)

    # torch imports its compiler stack at the first optimizer a process builds: a spare
    # does it before it is handed over, not the recovery.
    monkeypatch.setattr(torch.optim, "SGD", SGD)
    spares.preload("digits", ("orchestrator.runtime.loop.train_loop",))
    assert "orchestrator.runtime.loop.train_loop" in sys.modules
    assert stepped == [True]
    spares.preload("no_such_module:Nothing")  # the worker reports it when it builds the workload
    spares.preload("digits", ("no_such_module",))


def test_split_hands_over_the_spares_there_are_and_leaves_the_rest_to_new_actors() -> None:
    ticks = iter(range(100))
    held = {0: "spare-on-node-a", 2: "spare-on-node-c"}
    taken, rest = spares.split([0, 1, 2, 3], held.get, clock=lambda: float(next(ticks)))
    assert taken == [("spare-on-node-a", 1.0), ("spare-on-node-c", 1.0)]
    assert rest == [1, 3]
    assert spares.split([5], held.get) == ([], [5])


def test_each_hand_over_is_journaled_with_its_rank_pid_wait_and_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    class Worker:
        def __init__(self, rank: int, pid: int) -> None:
            self.distributed_context = type("Ctx", (), {"world_rank": rank})()
            self.metadata = type("Meta", (), {"pid": pid})()

    said: list[dict[str, Any]] = []
    monkeypatch.setattr(spares, "_journal", [lambda **fields: said.append(fields)])
    spares.journal_taken([(Worker(1, 4242), 0.25), (Worker(0, 4243), 0.0)], "group")
    assert said == [
        {"rank": 1, "pid": 4242, "waited_s": 0.25, "restart": "group"},
        {"rank": 0, "pid": 4243, "waited_s": 0.0, "restart": "group"},
    ]

    def broken(**fields: Any) -> None:
        raise OSError("control channel unreachable")

    monkeypatch.setattr(spares, "_journal", [broken])
    spares.journal_taken([(Worker(0, 1), 0.0)], "replacement")  # the hand-over stands


def test_a_node_is_vouched_for_only_when_its_spare_answers_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    class Spare:
        class get_metadata:
            @staticmethod
            def remote() -> str:
                return "ref"

    answers: list[BaseException | None] = [None]

    def get(refs: object, timeout: float) -> object:
        assert timeout == spares.VOUCH_S
        if answers[0] is not None:
            raise answers[0]
        return refs

    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(spares, "_spares", {"node-a": Spare(), "node-b": Spare()})
    assert spares.vouch({"node-a", "node-b"})
    assert not spares.vouch({"node-a", "node-c"}), "a node without a spare is not vouched for"
    assert not spares.vouch(set())
    answers[0] = TimeoutError("no answer: the node may be gone")
    assert not spares.vouch({"node-a"})


def test_ask_ready_names_the_ready_spares_and_those_of_them_silent_now(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    class Ref:
        def __init__(self, node: str, answers: bool) -> None:
            self.node, self.answers = node, answers

    silent_now = {"node-b"}

    class Spare:
        def __init__(self, node: str) -> None:
            self.node = node
            self.get_metadata = type("M", (), {"remote": staticmethod(lambda: Ref(node, node not in silent_now))})

    def get(ref: Ref, timeout: float) -> str:
        if not ref.answers:
            raise TimeoutError("no answer")
        return ref.node

    def wait(refs: list[Ref], num_returns: int, timeout: float) -> tuple[list[Ref], list[Ref]]:
        assert timeout == spares.VOUCH_S
        return [r for r in refs if r.answers], [r for r in refs if not r.answers]

    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(ray, "wait", wait)
    monkeypatch.setattr(spares, "_spares", {n: Spare(n) for n in ("node-a", "node-b", "node-c")})
    # node-c's spare is still importing: its first answer has not come.
    first = {"node-a": Ref("node-a", True), "node-b": Ref("node-b", True), "node-c": Ref("node-c", False)}
    monkeypatch.setattr(spares, "_ready", first)
    assert spares.ask_ready() == ({"node-a", "node-b"}, {"node-b"})
    monkeypatch.setattr(spares, "_ready", {})
    assert spares.ask_ready() == (set(), set())


def test_a_lost_nodes_bundle_is_pointed_at_the_spare_of_a_node_with_room(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.runtime.group import spare_nodes

    nodes = {n: {"CPU": 1.0} for n in ("head", "n1", "n2", "n3")}
    monkeypatch.setattr(spare_nodes, "live_nodes", lambda: nodes)
    # Spares wait on every node; n1 died (Ray still counts it); the group keeps a worker
    # on head; n2's spare is still importing, n3's is ready.
    monkeypatch.setattr(spares, "_spares", {n: object() for n in nodes})
    monkeypatch.setattr(spares, "_ready", {n: n for n in nodes})
    monkeypatch.setattr(spares, "_answered", lambda ref: ref != "n2")
    where = spares.SpareNodes(["head"], {"CPU": 1.0}, dead=frozenset({"n1"}))
    assert [where.node(), where.node(), where.node()] == ["n3", "n2", None]
    # A Ray that cannot be asked leaves the bundle to Ray, as before.
    monkeypatch.setattr(spare_nodes, "live_nodes", lambda: 1 / 0)
    assert spares.SpareNodes([], {"CPU": 1.0}, frozenset()).node() is None
