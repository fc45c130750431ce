"""The goodput and cost lines of action=status and the columns of action=list, from a
result's goodput block or an edited one."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.commands.goodput_text import cost_cell, goodput_cell, goodput_lines
from orchestrator.runstate.goodput import goodput_of
from providers.prices import NodePrice
from tests.unit.orchestrator.runstate.test_goodput import two_attempts

pytestmark = pytest.mark.unit


def block(prices: dict[str, NodePrice]) -> dict[str, Any]:
    return goodput_of(two_attempts(), prices, {"local-a": 2}, 278.0).as_dict()


def test_status_says_the_share_each_category_largest_first_and_the_cost_by_region() -> None:
    g = block({"local-a": NodePrice(3.0, "t"), "local-b": NodePrice(1.0, "t")})
    goodput, cost = goodput_lines(g)
    assert goodput.startswith("goodput    61.6% of 278.0s: productive 171.2s, start-up 30.0s, re-trained 24.8s")
    assert goodput.endswith("(50 steps trained twice)")
    assert cost == "cost       $0.2583 over 0.109 node-h (local-a $0.2233, local-b $0.0350)"
    assert goodput_cell(g) == "62%" and cost_cell(g) == "$0.2583"


def test_a_region_without_a_price_says_which_and_the_key_that_prices_it() -> None:
    g = block({"local-a": NodePrice(3.0, "t"), "local-b": NodePrice(None, "none")})
    cost = goodput_lines(g)[1]
    assert cost.startswith("cost       unknown over 0.109 node-h: no price for local-b")
    assert "cloud.regions.<region>.hourly_cost" in cost
    assert cost_cell(g) == "?"


@pytest.mark.parametrize(
    "edited",
    [
        None,
        "junk",
        {},
        {"goodput": "all", "wall_s": -1, "seconds": {"productive": "x"}, "cost_usd": 5, "unpriced": "a"},
        {"goodput": float("inf"), "seconds": [], "node_hours": {"a": "x"}, "cost_usd": {"total": True}},
    ],
)
def test_an_edited_block_shows_as_unknown_and_never_raises(edited: Any) -> None:
    lines = goodput_lines(edited)
    assert all("\n" not in line for line in lines)
    assert goodput_cell(edited) == "-" and cost_cell(edited) in ("-", "?")
