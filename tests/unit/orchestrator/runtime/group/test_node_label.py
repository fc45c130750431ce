"""Which node a rank runs on, read from the label its provider gave the node."""

from __future__ import annotations

import pytest

from orchestrator.runtime.group.node_label import UNKNOWN, known, node_index
from orchestrator.wire.schema import MAX_NODE_INDEX, NODE_LABEL

pytestmark = pytest.mark.unit


def test_a_labelled_node_says_its_index() -> None:
    assert node_index({NODE_LABEL: "0", "ray.io/node-id": "abc"}) == 0
    assert node_index({NODE_LABEL: "12"}) == 12


@pytest.mark.parametrize("value", ["", "-1", "1.5", "x", "²", " 3", str(MAX_NODE_INDEX + 1), "9" * 40])
def test_a_label_that_is_no_index_is_unknown(value: str) -> None:
    assert node_index({NODE_LABEL: value}) == UNKNOWN


def test_no_label_is_unknown() -> None:
    assert node_index({}) == UNKNOWN


def test_one_rank_unknown_makes_the_whole_list_unknown() -> None:
    # Half a list would read as "the other nodes ran no worker".
    assert known([0, 2]) == [0, 2]
    assert known([0, UNKNOWN]) is None
    assert known([]) is None
