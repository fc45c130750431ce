"""A worker group's placement group kept across a restart: which of its bundles the
next group takes, when it is kept, and when it is removed (Ray's side runs for real in
the chaos suite's whole-group restarts)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.runtime.group import placement

pytestmark = pytest.mark.unit

CPU = {"CPU": 1.0}


def test_the_next_group_takes_every_bundle_when_as_many_and_all_on_live_nodes() -> None:
    nodes = {0: "head", 1: "b"}
    assert placement.reusable(nodes, {"head", "b"}, 2) == [0, 1]
    # A bundle on a node lost: Ray would place it again, retrying without pause.
    assert placement.reusable({0: "head", 1: "lost"}, {"head"}, 1) is None
    assert placement.reusable({0: "head", 1: "lost"}, {"head"}, 2) is None
    # Another size: CPUs left reserved, or too few.
    assert placement.reusable(nodes, {"head", "b"}, 1) is None
    assert placement.reusable(nodes, {"head", "b"}, 3) is None
    # A bundle not placed (Ray placing it again) is on no node.
    assert placement.reusable({0: None, 1: "b"}, {"b"}, 2) is None
    assert placement.reusable({}, {"b"}, 0) is None


@pytest.fixture
def ray_side(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Ray's answers, as the test sets them, and the groups removed."""
    side: dict[str, Any] = {"removed": [], "bundles": {}, "live": set()}
    monkeypatch.setattr(placement, "_remove", lambda pg: side["removed"].append(pg))
    monkeypatch.setattr(placement, "_bundle_nodes", lambda pg: side["bundles"][pg])
    monkeypatch.setattr(placement, "_live_nodes", lambda: set(side["live"]))
    monkeypatch.setattr(placement, "_kept", [])
    return side


def test_a_group_released_in_a_restart_is_kept_and_taken_by_the_next_of_its_size(ray_side) -> None:
    ray_side["bundles"]["pg1"] = {0: "head", 1: "b"}
    ray_side["live"] = {"head", "b"}
    with placement.keeping():
        placement.release("pg1", CPU, "PACK")
    assert ray_side["removed"] == []
    assert placement.take(CPU, "PACK", 2, frozenset()) == ("pg1", [0, 1])
    assert placement._kept == [] and ray_side["removed"] == []
    # Taken once: nothing is kept for a second start.
    assert placement.take(CPU, "PACK", 2, frozenset()) is None


def test_a_kept_group_on_a_node_the_driver_knows_lost_is_removed_though_ray_still_counts_it(ray_side) -> None:
    ray_side["bundles"]["pg1"] = {0: "head", 1: "lost"}
    ray_side["live"] = {"head", "lost"}
    with placement.keeping():
        placement.release("pg1", CPU, "PACK")
    assert placement.take(CPU, "PACK", 2, frozenset({"lost"})) is None
    assert ray_side["removed"] == ["pg1"] and placement._kept == []


def test_a_kept_group_too_small_or_of_another_shape_is_removed_and_a_new_one_asked_for(ray_side) -> None:
    ray_side["bundles"].update({"pg1": {0: "head"}, "pg2": {0: "head"}, "pg3": {0: "head"}})
    ray_side["live"] = {"head"}
    with placement.keeping():
        placement.release("pg1", CPU, "PACK")
    assert placement.take(CPU, "PACK", 2, frozenset()) is None
    assert ray_side["removed"] == ["pg1"]
    with placement.keeping():
        placement.release("pg2", CPU, "PACK")
    assert placement.take({"CPU": 2.0}, "PACK", 1, frozenset()) is None
    with placement.keeping():
        placement.release("pg3", CPU, "PACK")
    assert placement.take(CPU, "SPREAD", 1, frozenset()) is None
    assert ray_side["removed"] == ["pg1", "pg2", "pg3"]


def test_a_group_released_outside_a_restart_is_removed_and_one_kept_is_replaced_by_the_next(ray_side) -> None:
    placement.release("pg1", CPU, "PACK")
    assert ray_side["removed"] == ["pg1"] and placement._kept == []
    with placement.keeping():
        placement.release("pg2", CPU, "PACK")
        placement.release("pg3", CPU, "PACK")
    assert ray_side["removed"] == ["pg1", "pg2"] and [k.pg for k in placement._kept] == ["pg3"]
    # The run's end: what is kept goes.
    placement.drop()
    assert ray_side["removed"] == ["pg1", "pg2", "pg3"] and placement._kept == []
    assert placement._keeping == [False]


def test_a_kept_group_ray_cannot_describe_is_removed_not_taken(ray_side, monkeypatch) -> None:
    def fails(pg: Any) -> dict[int, str | None]:
        raise RuntimeError("GCS unreachable")

    monkeypatch.setattr(placement, "_bundle_nodes", fails)
    with placement.keeping():
        placement.release("pg1", CPU, "PACK")
    assert placement.take(CPU, "PACK", 1, frozenset()) is None
    assert ray_side["removed"] == ["pg1"]
