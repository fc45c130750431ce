"""How the console shows numbers and untrusted text: bounded, one line, in the words
``action=list`` uses (its duration format), so the terminal and the page agree."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.commands.runs_list import fmt_duration
from orchestrator.errors import printable

# The most characters of one value from a journal, a name or an event shown anywhere: a
# journal line may be 1 MiB, and a page is read by a person.
MAX_TEXT = 300


def cut(value: Any, most: int = MAX_TEXT) -> str:
    """``value`` as one printable line of at most ``most`` characters ("-" for None)."""
    if value is None:
        return "-"
    text = printable(str(value)[: most * 4])  # printable escapes, so bound what it reads first
    return text if len(text) <= most else text[: most - 1] + "…"


def age(seconds: float | None) -> str:
    """How long ago, as action=list writes a duration ("-": not known)."""
    if seconds is None:
        return "-"
    return fmt_duration(max(0.0, seconds))


def clock(ts: float | None) -> str:
    """A moment as this machine's local time."""
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def seconds(value: Any) -> str:
    """A duration measured in seconds (an RTO, a provisioning), to a tenth."""
    return f"{float(value):.1f}s" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def number(value: Any) -> int | float | None:
    """A JSON number from a journal, or None (a bool is no number here)."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None
