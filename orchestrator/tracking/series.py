"""Which metric points may go to the tracker now: one pure decision per series.

A point (a metric's value at a training step) waits until a committed checkpoint covers
its step. A failover restores the newest checkpoint the new region has and trains the
steps after it again: the waiting points past that step are dropped, so what the tracker
gets of a lost step is its value trained again, never both. A step the tracker already
has is never given twice (a restore from a replica older than the commit that let it
out, an adopted attempt that reports its loss series again from its start): the first
value stays. A tracker's series is then one value per step, in step order, as MLflow's
and W&B's plots want it. At the run's end, whatever still waits is let out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

# Points waiting at most: a run that never commits a checkpoint (job.train_func without
# one, a search's trial without) would otherwise hold its whole curve until its end. Past
# it the oldest are let out: a restore may then find a step logged already (kept as it was).
MAX_PENDING = 100_000


@dataclass(frozen=True)
class Point:
    key: str
    step: int
    value: float
    at: float = 0.0  # when it was measured (seconds since the epoch), 0: unknown


@dataclass(frozen=True)
class Offered:
    """New points from the run (a loss series' flush, a progress report, a trial's result)."""

    points: tuple[Point, ...]


@dataclass(frozen=True)
class Committed:
    """A checkpoint at ``step`` was committed: the steps up to it survive any failover
    that restores it."""

    step: int


@dataclass(frozen=True)
class Restored:
    """Training goes on from ``step`` (a checkpoint's, 0 for none): the steps after it are
    trained again."""

    step: int


@dataclass(frozen=True)
class Ended:
    """The run's end: nothing is trained again."""


Happening = Offered | Committed | Restored | Ended


def _frozen(d: dict[str, int]) -> Mapping[str, int]:
    return MappingProxyType(d)


@dataclass(frozen=True)
class Series:
    """One tracker run's points: those waiting, and what the tracker has (the highest step
    written per key)."""

    pending: tuple[Point, ...] = ()
    written: Mapping[str, int] = field(default_factory=lambda: _frozen({}))
    # The newest committed step of the training as it goes now; -1: none yet.
    committed: int = -1


def advance(series: Series, what: Happening, max_pending: int = MAX_PENDING) -> tuple[Series, tuple[Point, ...]]:
    """The series after ``what``, and the points to write now (by step, then key)."""
    if isinstance(what, Offered):
        return _offered(series, what.points, max_pending)
    if isinstance(what, Committed):
        committed = max(series.committed, what.step)
        return _release(Series(series.pending, series.written, committed), lambda p: p.step <= committed)
    if isinstance(what, Restored):
        kept = tuple(p for p in series.pending if p.step <= what.step)
        return Series(kept, series.written, what.step), ()
    return _release(series, lambda p: True)


def _offered(series: Series, points: tuple[Point, ...], max_pending: int) -> tuple[Series, tuple[Point, ...]]:
    # The newest value of a (key, step) wins while it waits: a report of the same step again
    # (a restart in place before its first commit) replaces the earlier one.
    waiting = {(p.key, p.step): p for p in series.pending}
    for p in points:
        if p.step > series.written.get(p.key, -1):
            waiting[(p.key, p.step)] = p
    new, out = _release(
        Series(tuple(waiting.values()), series.written, series.committed), lambda p: p.step <= series.committed
    )
    extra = len(new.pending) - max_pending
    if extra > 0:
        oldest = set(sorted(new.pending, key=_order)[:extra])
        new, more = _release(new, lambda p: p in oldest)
        out = tuple(sorted(out + more, key=_order))
    return new, out


def _release(series: Series, due: Callable[[Point], bool]) -> tuple[Series, tuple[Point, ...]]:
    out = tuple(sorted((p for p in series.pending if due(p)), key=_order))
    if not out:
        return series, ()
    kept = tuple(p for p in series.pending if not due(p))
    written = dict(series.written)
    for p in out:
        written[p.key] = max(written.get(p.key, -1), p.step)
    return Series(kept, _frozen(written), series.committed), out


def _order(p: Point) -> tuple[int, str]:
    return p.step, p.key


def resumed(written: Mapping[str, int]) -> Series:
    """A series whose tracker run already has ``written`` (the highest step per key)."""
    return Series(written=_frozen(dict(written)))
