"""Spare nodes: each node's room beyond the group's workers, and which spare a
lost worker takes."""

from __future__ import annotations

import pytest

from orchestrator.runtime.group.spare_nodes import fitting, pick, room, workers_fit

pytestmark = pytest.mark.unit

ONE_CPU = {"CPU": 1.0}


def test_a_node_fits_as_many_workers_as_its_scarcest_resource_allows() -> None:
    assert workers_fit({"CPU": 4.0, "GPU": 2.0}, {"CPU": 1.0, "GPU": 1.0}) == 2
    assert workers_fit({"CPU": 0.5}, ONE_CPU) == 0
    assert workers_fit({"CPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}) == 0, "a node without GPUs fits no GPU worker"
    assert workers_fit({"CPU": 3.0}, {"CPU": 0.1}) == 30, "no rounding down below a whole worker"
    assert workers_fit({}, {"CPU": 0.0}) == 1, "a worker that asks for nothing fits anywhere (once)"


def test_room_is_what_each_live_node_fits_less_the_workers_the_group_keeps_there() -> None:
    nodes = {"head": {"CPU": 1.0}, "n1": {"CPU": 1.0}, "n2": {"CPU": 1.0}, "big": {"CPU": 4.0}}
    # The group keeps a worker on head and two on big; n1 is lost while Ray still counts it.
    free = room(nodes, ONE_CPU, ["head", "big", "big"], dead=frozenset({"n1"}))
    assert free == {"n2": 1, "big": 2}
    assert room({"n": {"CPU": 1.0}}, ONE_CPU, ["n", "n"]) == {}, "over-full is no room"


def test_a_lost_worker_takes_a_ready_spare_on_a_node_with_room_first() -> None:
    free = {"n2": 1, "n3": 1}
    # n1 has a spare but no room (the group fills it); n3's spare is ready, n2's importing.
    assert pick(free, spares=["n1", "n2", "n3"], ready=["n1", "n3"]) == "n3"
    assert free == {"n2": 1, "n3": 0}
    # The next one in the same round takes what is left, ready or not.
    assert pick(free, spares=["n1", "n2", "n3"], ready=["n1", "n3"]) == "n2"
    assert pick(free, spares=["n1", "n2", "n3"], ready=["n1", "n3"]) is None, "no room left"
    assert pick({"n2": 1}, spares=["n1"], ready=["n1"]) is None, "room without a spare is not a hand-over"


def test_every_node_that_fits_a_worker_holds_a_spare() -> None:
    nodes = {"b": {"CPU": 1.0}, "a": {"CPU": 2.0}, "tiny": {"CPU": 0.5}}
    assert fitting(nodes, ONE_CPU) == ["a", "b"]
