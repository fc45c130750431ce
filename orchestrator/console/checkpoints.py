"""Each region's store as the journal tells it: its newest checkpoint that verified there,
when that was written, and the replication lag of the last copy to it.

A checkpoint is in a store once the runtime committed it there (``checkpoint_committed``:
its signed manifest written) or copied and checked it there (``replicated``, whose copy is
verified file by file); one a restore found not to verify in a store
(``checkpoint_skipped``) is not counted in that store. A fenced attempt's word
(``by="zombie"``) is nobody's. Pure: it takes the events ``read_typed`` read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.console.text import number
from orchestrator.runstate.events import CheckpointSkipped, Event, Replicated, RuntimeReport


@dataclass(frozen=True)
class StoreCheckpoint:
    """One store's newest verified checkpoint (``step`` None: none known)."""

    region: str
    step: int | None = None
    at: float | None = None  # when it was written there (the runtime's clock, else the journal's)
    lag_s: float | None = None  # the last copy's lag behind its commit (None: no copy to this store yet)
    skipped: int = 0  # checkpoints a restore found not to verify in this store

    def age_s(self, now: float) -> float | None:
        return None if self.at is None else max(0.0, now - self.at)


def _step(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _text(value: object) -> str | None:
    # Region names come from the runtime's word: bounded, never trusted as more than a key.
    return value[:100] if isinstance(value, str) and value else None


class _Fold:
    def __init__(self) -> None:
        self.written: dict[str, dict[int, float]] = {}
        self.lag: dict[str, float] = {}
        self.bad: dict[str, set[int]] = {}

    def put(self, region: str | None, step: int | None, at: float, lag: float | None = None) -> None:
        if region is None or step is None:
            return
        self.written.setdefault(region, {})[step] = at
        if lag is not None:
            self.lag[region] = lag

    def skip(self, region: str | None, step: int | None) -> None:
        if region is not None and step is not None:
            self.bad.setdefault(region, set()).add(step)

    def result(self) -> dict[str, StoreCheckpoint]:
        out = {}
        for region in sorted(set(self.written) | set(self.bad)):
            bad = self.bad.get(region, set())
            good = {s: t for s, t in self.written.get(region, {}).items() if s not in bad}
            step = max(good, default=None)
            out[region] = StoreCheckpoint(
                region=region,
                step=step,
                at=None if step is None else good[step],
                lag_s=self.lag.get(region),
                skipped=len(bad),
            )
        return out


def store_checkpoints(events: Iterable[Event]) -> dict[str, StoreCheckpoint]:
    """Each store the journal names, by region, with its newest verified checkpoint."""
    fold = _Fold()
    for ev in events:
        if isinstance(ev, RuntimeReport):
            f = ev.fields
            if f.get("by", "runtime") != "runtime":
                continue
            at = float(number(f.get("time")) or ev.ts)
            if ev.kind == "checkpoint_committed":
                fold.put(_text(f.get("region")), _step(f.get("step")), at)
            elif ev.kind == "replicated":
                lag = number(f.get("lag_s"))
                fold.put(_text(f.get("to")), _step(f.get("step")), at, None if lag is None else float(lag))
            elif ev.kind == "checkpoint_skipped":
                fold.skip(_text(f.get("region")), _step(f.get("step")))
        elif isinstance(ev, Replicated):
            fold.put(_text(ev.to), _step(ev.step), ev.ts, ev.lag_s)
        elif isinstance(ev, CheckpointSkipped):
            fold.skip(_text(ev.region), _step(ev.step))
    return fold.result()
