"""The driver's own word on lost nodes: which Ray nodes it takes for the controller's
lost ones, and how a group is kept off them (the kill and the placement run on real
Ray: tests/chaos/test_nodes.py's elastic run)."""

from __future__ import annotations

import pytest

from orchestrator.runtime.group.lost_nodes import exclude_selector, identify

pytestmark = pytest.mark.unit


def test_the_silent_nodes_are_taken_only_when_every_node_had_a_ready_spare_and_as_many_fell_silent() -> None:
    group = {"a", "b", "c"}
    assert identify(1, group, ready={"a", "b", "c"}, unanswered={"b"}) == {"b"}
    assert identify(2, group, ready={"a", "b", "c"}, unanswered={"b", "c"}) == {"b", "c"}
    # A node whose spare never answered yet (still importing) might be silent for that alone.
    assert identify(1, group, ready={"a", "b"}, unanswered={"b"}) == set()
    # More silent than the controller lost: a live node among them; fewer: a lost node not found.
    assert identify(1, group, ready=group, unanswered={"a", "b"}) == set()
    assert identify(2, group, ready=group, unanswered={"b"}) == set()
    # A silent spare on a node the group does not use is not the group's loss.
    assert identify(1, {"a", "b"}, ready={"a", "b", "x"}, unanswered={"x"}) == set()
    assert identify(0, group, ready=group, unanswered={"b"}) == set()
    assert identify(1, set(), ready=set(), unanswered=set()) == set()


def test_a_group_is_kept_off_the_dead_nodes_by_their_ray_node_id_label() -> None:
    assert exclude_selector(frozenset()) is None
    assert exclude_selector(frozenset({"bb", "aa"})) == {"ray.io/node-id": "!in(aa,bb)"}
