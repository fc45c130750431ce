"""How values from runs are shown: one bounded, printable line."""

from __future__ import annotations

import pytest

from orchestrator.console.text import MAX_TEXT, age, clock, cut, number, seconds

pytestmark = pytest.mark.unit


def test_a_value_is_one_printable_bounded_line() -> None:
    assert cut(None) == "-" and cut(3) == "3"
    assert cut("a\nb\x1b[2J") == "a\\nb\\x1b[2J"
    long = cut("x" * 10_000)
    assert len(long) == MAX_TEXT and long.endswith("…")
    assert cut("<script>", 5) == "<scr…"  # cut, not escaped: the page escapes


def test_durations_read_as_action_list_writes_them() -> None:
    assert age(None) == "-" and age(-3) == "0s" and age(75) == "1m 15s" and age(7300) == "2h 01m"
    assert seconds(1.234) == "1.2s" and seconds(None) == "-" and seconds(True) == "-"
    assert clock(None) == "-" and clock(0.0).startswith(("1970", "1969"))
    assert number(2) == 2 and number(1.5) == 1.5 and number(False) is None and number("1") is None
