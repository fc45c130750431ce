"""The spare workers' switch and their preload (the hand-over itself runs on real Ray:
tests/chaos/test_survivors.py)."""

from __future__ import annotations

import sys

import pytest

from orchestrator.runtime import spares

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


def test_a_preload_imports_the_loop_and_the_workload_and_never_raises() -> None:
    spares.preload("digits")
    assert "orchestrator.runtime.train_loop" in sys.modules
    spares.preload("no_such_module:Nothing")  # the worker reports it when it builds the workload


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
