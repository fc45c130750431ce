"""A standby pool (``recovery.standby_pool``): runs that name the same pool share one warm
cluster per region, held through the control store. The decisions, pure.

Each region of a pool has a log of numbered entries, each created only if absent (so of
two runs writing the next entry at once exactly one does), each sealed with the pool's
key (derived from the user's control key: a store writer without it forges none):

- ``launching``: a run is provisioning the pool's standby there (until ``expires_at``);
- ``ready``: the standby is up (its cluster named in the entry);
- ``taken``: a run lost its region and took it; the pool launches the next one;
- ``gone``: it was lost, or the last run it covered ended, and it was torn down.

A run that wants a standby in a region is a *member* there, in a file of its own
renewed while it waits: the standby's cost is split between the members it covered,
second by second (``share_s``).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

LAUNCHING, READY, TAKEN, GONE = "launching", "ready", "taken", "gone"
STATES = (LAUNCHING, READY, TAKEN, GONE)
# A pool's name goes in a path of the control store.
POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# The intervals a member's file keeps (the oldest dropped): a run that comes and goes.
MAX_INTERVALS = 32
_POOL_LABEL = b"orchestrator standby pool v1\0"


def pool_key(control_key: bytes, pool: str) -> bytes:
    """What seals a pool's records: every run given the user's control key has it."""
    return hmac.new(control_key, _POOL_LABEL + pool.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class Entry:
    """One entry of a region's log (``seq`` from 1)."""

    seq: int
    state: str
    run_id: str  # who wrote it
    at: float
    expires_at: float | None = None  # a launch's deadline
    cluster: dict[str, Any] | None = None  # the standby's ClusterHandle (name, region, provider, address, info)
    launched_at: float | None = None  # since when the standby costs (its launch began)
    host: str | None = None  # the machine that launched it (a local provider's cluster is that machine's)

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq": self.seq, "state": self.state, "run_id": self.run_id, "at": self.at}
        for name in ("expires_at", "cluster", "launched_at", "host"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


def entry_of(obj: dict[str, Any], seq: int) -> Entry | str:
    """The entry an opened record holds, or why it is none (one line)."""
    if obj.get("seq") != seq:
        return f"is sealed as entry {str(obj.get('seq'))[:20]}, not {seq}"
    state, run_id, at = obj.get("state"), obj.get("run_id"), _time(obj.get("at"))
    if state not in STATES or not isinstance(run_id, str) or not run_id or at is None:
        return "is not a pool entry"
    expires_at, launched_at = _time(obj.get("expires_at")), _time(obj.get("launched_at"))
    cluster = obj.get("cluster")
    if state == LAUNCHING and expires_at is None:
        return "is a launch without a deadline"
    if state == READY:
        if not _handle(cluster):
            return "is a ready standby without its cluster"
    elif cluster is not None and not _handle(cluster):
        return "names a cluster that is not one"
    host = obj.get("host")
    if host is not None and not isinstance(host, str):
        return "names a host that is not one"
    return Entry(seq, state, run_id[:200], at, expires_at, cluster, launched_at, host[:200] if host else None)


def _time(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value < 1e11 else None


def _handle(cluster: Any) -> bool:
    if not isinstance(cluster, dict):
        return False
    strings = all(isinstance(cluster.get(k), str) and cluster[k] for k in ("name", "region", "provider", "address"))
    return strings and isinstance(cluster.get("info", {}), dict)


def wants_launch(current: Entry | None, now: float) -> bool:
    """Does the pool need a standby launched (nothing there, or what was is taken, gone,
    or a launch past its deadline)? A live launch or a ready standby is joined instead."""
    if current is None or current.state in (TAKEN, GONE):
        return True
    if current.state == LAUNCHING:
        return current.expires_at is not None and now > current.expires_at
    return False


def standing(entries: Sequence[Entry]) -> Entry | None:
    """The standby an entry ``taken`` or ``gone`` ended: its ``ready`` entry, the newest."""
    for e in reversed(entries):
        if e.state == READY:
            return e
    return None


@dataclass(frozen=True)
class Member:
    """A run covered by a region's standby over ``intervals`` ((joined, left or None));
    an open interval counts until ``expires_at`` (a run that stopped renewing is gone)."""

    run_id: str
    intervals: tuple[tuple[float, float | None], ...]
    expires_at: float

    def body(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "intervals": [list(i) for i in self.intervals], "expires_at": self.expires_at}

    def spans(self) -> list[tuple[float, float]]:
        return [(a, b if b is not None else max(a, self.expires_at)) for a, b in self.intervals]

    def joined(self, now: float, expires_at: float) -> Member:
        """Renewed at ``now``: an open interval stays open, else a new one opens."""
        intervals = self.intervals
        if not intervals or intervals[-1][1] is not None:
            intervals = (*intervals, (now, None))[-MAX_INTERVALS:]
        return Member(self.run_id, intervals, expires_at)

    def left(self, now: float) -> Member:
        if not self.intervals or self.intervals[-1][1] is not None:
            return self
        start = self.intervals[-1][0]
        return Member(self.run_id, (*self.intervals[:-1], (start, max(start, now))), now)


def member_of(obj: dict[str, Any], run_id: str) -> Member | str:
    if obj.get("run_id") != run_id:
        return "is another run's membership"
    expires_at, raw = _time(obj.get("expires_at")), obj.get("intervals")
    if expires_at is None or not isinstance(raw, list) or len(raw) > MAX_INTERVALS:
        return "is not a membership"
    intervals: list[tuple[float, float | None]] = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 2:
            return "is not a membership"
        start, end = _time(item[0]), (None if item[1] is None else _time(item[1]))
        if start is None or (item[1] is not None and (end is None or end < start)):
            return "has an interval that is not one"
        intervals.append((start, end))
    return Member(run_id, tuple(intervals), expires_at)


def share_s(me: str, members: Iterable[Member], start: float, end: float) -> float:
    """``me``'s share of a standby's seconds from ``start`` to ``end``: each second split
    evenly between the members covered then (``me`` counted over its own spans only)."""
    spans = {
        m.run_id: [(max(a, start), min(b, end)) for a, b in m.spans() if min(b, end) > max(a, start)] for m in members
    }
    mine = spans.get(me, [])
    if not mine:
        return 0.0
    cuts = sorted({start, end, *(t for ss in spans.values() for s in ss for t in s)})
    total = 0.0
    for a, b in itertools.pairwise(cuts):
        mid = (a + b) / 2
        if not any(x <= mid < y for x, y in mine):
            continue
        n = sum(1 for ss in spans.values() if any(x <= mid < y for x, y in ss))
        total += (b - a) / max(1, n)
    return total


def others_waiting(me: str, members: Iterable[Member], now: float) -> bool:
    """Does another run still wait on the region's standby (an open, unexpired interval)?"""
    return any(m.run_id != me and m.intervals and m.intervals[-1][1] is None and m.expires_at > now for m in members)
