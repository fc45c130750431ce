"""Where a run's wall time went, and what its nodes cost: one fold over the journal, so
that result.json, ``action=status``, ``action=list`` and ``action=report`` agree, for a
live run as for one replayed years later.

The wall time (each controller's session, from its run_started or run_resumed to its
last line; the gaps while no controller ran are not the run's) is cut at the moments the
journal names into phases, each second in exactly one category, so the categories sum to
the wall time by construction:

- ``provisioning``: asking the provider for a cluster, until it is up;
- ``waiting_for_capacity``: provisioning tries the provider refused (a retry or a region
  given up) and a world waiting for enough nodes to fit;
- ``startup``: from the cluster up to the workers ready (runtime, Ray, workers, data);
- ``restore``: choosing and loading the checkpoint the attempt resumes from;
- ``productive``: training steps the run had not trained before;
- ``retrained``: training steps trained again after a restore (the steps between the
  checkpoint restored and the furthest step an earlier attempt reached), at the step
  time of the attempt that trained them again;
- ``checkpoint_stall``: the seconds a checkpoint's snapshot blocked the training loop;
- ``failure_detection``: from a failure (a lost cluster, a dead worker) to the
  controller seeing it: training that was already lost;
- ``orchestration``: the controller's own work: reading fences, decisions, teardowns,
  replacing a node, writing the result.

These follow ML Goodput's split of badput (provisioning, program start-up, checkpoint
loading, lost progress, checkpoint saving, failure detection). ``goodput`` is
productive / wall.

Node-hours count each cluster from its launch (provisioned less its provision_s) to its
teardown (or the session's end, a cluster never torn down) times its nodes. A warm
standby idles beside the run rather than in its wall time: its hours up to its
activation (or teardown) are ``standby_idle_node_hours``, costed like the others. A
standby pool's cluster counts there by the run's share of it (``pool_share``: each of
its seconds split between the runs it covered then), and from its taking as the run's own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.runstate.events import (
    AttemptAdopted,
    AttemptEnded,
    AttemptStarted,
    Event,
    FailureDetected,
    FencesRead,
    NodeLost,
    NodeReplaced,
    NodeReplaceFailed,
    PoolShare,
    Provisioned,
    ProvisionFailed,
    ProvisionRetry,
    RunFinished,
    RunResumed,
    RunStarted,
    RuntimeReport,
    StandbyActivated,
    Teardown,
)
from providers.prices import NodePrice

CATEGORIES = (
    "productive",
    "retrained",
    "checkpoint_stall",
    "restore",
    "startup",
    "provisioning",
    "waiting_for_capacity",
    "failure_detection",
    "orchestration",
)
TRAINING = "training"  # a phase split into productive, retrained and checkpoint_stall at the end


@dataclass(frozen=True)
class Goodput:
    """A run's time by category, its node-hours and their cost (see the module's doc)."""

    wall_s: float
    seconds: Mapping[str, float]
    retrained_steps: int
    node_hours: Mapping[str, float]
    standby_idle_node_hours: Mapping[str, float]
    prices: Mapping[str, NodePrice]

    @property
    def goodput(self) -> float | None:
        return self.seconds["productive"] / self.wall_s if self.wall_s > 0 else None

    def cost_by_region(self, hours: Mapping[str, float] | None = None) -> dict[str, float | None]:
        """USD by region of ``hours`` (node-hours by region; default: every hour the run
        paid for, its standby's idle ones included); None for a region without a price."""
        if hours is None:
            regions = sorted({*self.node_hours, *self.standby_idle_node_hours})
            hours = {r: self.node_hours.get(r, 0.0) + self.standby_idle_node_hours.get(r, 0.0) for r in regions}
        out: dict[str, float | None] = {}
        for region, h in hours.items():
            price = self.prices.get(region)
            out[region] = None if price is None or price.usd_per_hour is None else h * price.usd_per_hour
        return out

    @property
    def unpriced(self) -> tuple[str, ...]:
        return tuple(r for r, c in self.cost_by_region().items() if c is None)

    @property
    def cost_usd(self) -> float | None:
        """The whole run's cost; None when any region it used has no price."""
        return _total(self.cost_by_region())

    def as_dict(self) -> dict[str, Any]:
        by_region = self.cost_by_region()
        return {
            "goodput": _r(self.goodput, 4),
            "wall_s": _r(self.wall_s, 3),
            "seconds": {c: _r(self.seconds[c], 3) for c in CATEGORIES},
            "retrained_steps": self.retrained_steps,
            "node_hours": {r: _r(h, 6) for r, h in sorted(self.node_hours.items())},
            "standby_idle_node_hours": {r: _r(h, 6) for r, h in sorted(self.standby_idle_node_hours.items())},
            "cost_usd": {
                "total": _r(_total(by_region), 6),
                "by_region": {r: _r(c, 6) for r, c in by_region.items()},
                "standby_idle": _r(_total(self.cost_by_region(self.standby_idle_node_hours)), 6),
            },
            "prices": {r: p.as_dict() for r, p in sorted(self.prices.items())},
            "unpriced": [r for r, c in by_region.items() if c is None],
        }


def _total(costs: Mapping[str, float | None]) -> float | None:
    """The sum, or None when any part is unknown."""
    return None if any(c is None for c in costs.values()) else sum((c for c in costs.values() if c is not None), 0.0)


def _r(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


@dataclass
class _Gen:
    restored: int | None = None
    reached: int = 0
    stall_s: float = 0.0
    training_s: float = 0.0
    started_training: bool = False


@dataclass
class _Cluster:
    region: str
    start: float
    end: float | None = None
    standby_until: float | None = None  # a standby: when it stopped idling (activated or torn down)
    standby: bool = False


@dataclass
class _Fold:
    sessions: list[list[float]] = field(default_factory=list)
    marks: list[tuple[float, int, str, int | None]] = field(default_factory=list)  # (t, seq, phase, gen)
    gens: dict[int, _Gen] = field(default_factory=dict)
    clusters: dict[str, _Cluster] = field(default_factory=dict)
    # Seconds of standby pools' clusters this run's shares came to, by region.
    pool_idle: dict[str, float] = field(default_factory=dict)
    gen: int | None = None
    final_step: int | None = None

    def mark(self, t: float | None, phase: str) -> None:
        if t is not None and self.sessions:
            self.marks.append((t, len(self.marks), phase, self.gen))

    def of(self, gen: int | None) -> _Gen:
        return self.gens.setdefault(gen if gen is not None else 0, _Gen())


def amount(value: Any) -> float | None:
    """A number read from the wire or a file someone may have edited (a runtime report's
    field, a result's block): finite and not negative, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _step(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**15 else None


def goodput_of(
    events: Iterable[Event],
    prices: Mapping[str, NodePrice],
    nodes: Mapping[str, int],
    now: float | None = None,
) -> Goodput:
    """The run's goodput from its journal's typed events; ``now``: where the last session
    ends (a live run's present, or the moment its result is written), else at its last line."""
    f = _Fold()
    for ev in events:
        _apply(f, ev)
    if f.sessions and now is not None and now > f.sessions[-1][1]:
        f.sessions[-1][1] = now
    seconds = {c: 0.0 for c in (*CATEGORIES, TRAINING)}
    for (start, end), marks in zip(f.sessions, _by_session(f), strict=True):
        clamped = sorted((min(max(t, start), end), seq, phase, gen) for t, seq, phase, gen in marks)
        bounds = [*(m[0] for m in clamped[1:]), end]
        for (t, _seq, phase, gen), t_next in zip(clamped, bounds, strict=True):
            span = max(0.0, t_next - t)
            seconds[phase] += span
            if phase == TRAINING:
                f.of(gen).training_s += span
    retrained_steps, retrained_s, stall_s = _split_training(f)
    seconds["retrained"] = retrained_s
    seconds["checkpoint_stall"] = stall_s
    seconds["productive"] = max(0.0, seconds.pop(TRAINING) - retrained_s - stall_s)
    wall = sum(end - start for start, end in f.sessions)
    hours, idle = _node_hours(f, nodes)
    return Goodput(wall, seconds, retrained_steps, hours, idle, dict(prices))


def _by_session(f: _Fold) -> list[list[tuple[float, int, str, int | None]]]:
    """Each session's marks, the first at its start: a mark belongs to the session it was
    journaled in (marks are kept in the journal's order)."""
    out: list[list[tuple[float, int, str, int | None]]] = [[] for _ in f.sessions]
    session = -1
    for t, seq, phase, gen in f.marks:
        if phase == "_session":
            session += 1
            phase = "orchestration"
        out[max(session, 0)].append((t, seq, phase, gen))
    return out


def _split_training(f: _Fold) -> tuple[int, float, float]:
    """Steps trained twice, their seconds, and the checkpoint stalls, over every attempt."""
    furthest = 0
    steps = 0
    retrained_s = stall_s = 0.0
    for gen in sorted(f.gens):
        g = f.gens[gen]
        stall = min(g.stall_s, g.training_s)
        stall_s += stall
        if g.restored is not None:
            reached = max(g.reached, g.restored)
            again = max(0, min(furthest, reached) - g.restored)
            trained = max(1, reached - g.restored)
            step_s = (g.training_s - stall) / trained
            steps += again
            retrained_s += min(g.training_s - stall, again * step_s)
            furthest = max(furthest, reached)
        else:
            furthest = max(furthest, g.reached)
    return steps, retrained_s, stall_s


def _node_hours(f: _Fold, nodes: Mapping[str, int]) -> tuple[dict[str, float], dict[str, float]]:
    end_of_run = f.sessions[-1][1] if f.sessions else 0.0
    hours: dict[str, float] = {}
    idle: dict[str, float] = {}
    for c in f.clusters.values():
        n = nodes.get(c.region, 1)
        end = c.end if c.end is not None else end_of_run
        if c.standby:
            until = min(c.standby_until if c.standby_until is not None else end, end)
            idle[c.region] = idle.get(c.region, 0.0) + max(0.0, until - c.start) * n / 3600
            busy = max(0.0, end - until)
        else:
            busy = max(0.0, end - c.start)
        if busy or not c.standby:
            hours[c.region] = hours.get(c.region, 0.0) + busy * n / 3600
    for region, seconds in f.pool_idle.items():
        idle[region] = idle.get(region, 0.0) + seconds * nodes.get(region, 1) / 3600
    return hours, idle


def _apply(f: _Fold, ev: Event) -> None:
    if isinstance(ev, RunStarted | RunResumed):
        f.sessions.append([ev.ts, ev.ts])
        f.marks.append((ev.ts, len(f.marks), "_session", f.gen))
        return
    if not f.sessions:
        return  # lines before the run's first start: none of its time
    f.sessions[-1][1] = max(f.sessions[-1][1], ev.ts)
    if isinstance(ev, FencesRead):
        f.mark(ev.ts, "orchestration")
    elif isinstance(ev, AttemptStarted):
        f.gen = ev.generation
        f.of(ev.generation)
        f.mark(ev.ts, "startup" if ev.standby else "provisioning")
    elif isinstance(ev, ProvisionRetry):
        _relabel_last(f, "provisioning", "waiting_for_capacity")
        f.mark(ev.ts, "provisioning")
    elif isinstance(ev, ProvisionFailed):
        if ev.purpose in (None, "attempt"):
            _relabel_last(f, "provisioning", "waiting_for_capacity")
            f.mark(ev.ts, "orchestration")
    elif isinstance(ev, Provisioned) and ev.purpose == "pool":
        pass  # a standby pool's: each run it covered pays its share (pool_share)
    elif isinstance(ev, PoolShare):
        share = amount(ev.share_s)
        if share:
            f.pool_idle[ev.region] = f.pool_idle.get(ev.region, 0.0) + share
    elif isinstance(ev, Provisioned):
        start = ev.ts - (amount(ev.provision_s) or 0.0)
        if ev.kept_from is None:
            f.clusters[ev.cluster] = _Cluster(ev.region, start, standby=ev.purpose == "standby")
        if ev.purpose == "attempt":
            f.mark(ev.ts, "startup")
    elif isinstance(ev, StandbyActivated):
        c = f.clusters.get(ev.cluster or "")
        if c is not None:
            c.standby_until = ev.ts
        f.mark(ev.ts, "startup")
    elif isinstance(ev, AttemptAdopted):
        f.gen = ev.generation
        f.mark(ev.ts, TRAINING if f.of(ev.generation).started_training else "startup")
    elif isinstance(ev, Teardown):
        c = f.clusters.get(ev.cluster)
        if c is not None and c.end is None:
            c.end = ev.ts
            if c.standby and c.standby_until is None:
                c.standby_until = ev.ts
    elif isinstance(ev, FailureDetected):
        after = amount(ev.detected_after_s) or 0.0
        f.mark(ev.ts - after, "failure_detection")
        f.mark(ev.ts, "orchestration")
        if ev.last_step is not None:
            g = f.of(f.gen)
            g.reached = max(g.reached, ev.last_step)
    elif isinstance(ev, NodeLost | NodeReplaced | NodeReplaceFailed):
        f.mark(ev.ts, "orchestration")
    elif isinstance(ev, AttemptEnded):
        g = f.of(ev.generation)
        g.reached = max(g.reached, _step(ev.last_step) or 0)
        f.mark(ev.ts, "orchestration")
    elif isinstance(ev, RunFinished):
        if ev.final_step is not None and f.gen is not None:
            g = f.of(f.gen)
            g.reached = max(g.reached, ev.final_step)
        f.mark(ev.ts, "orchestration")
    elif isinstance(ev, RuntimeReport) and ev.fields.get("by", "runtime") == "runtime":
        _runtime(f, ev)


def _relabel_last(f: _Fold, phase: str, to: str) -> None:
    for i in range(len(f.marks) - 1, -1, -1):
        if f.marks[i][2] == "_session":
            return
        if f.marks[i][2] == phase:
            t, seq, _p, gen = f.marks[i]
            f.marks[i] = (t, seq, to, gen)
            return


def _runtime(f: _Fold, ev: RuntimeReport) -> None:
    fields = ev.fields
    gen = fields.get("generation")
    gen = gen if isinstance(gen, int) and not isinstance(gen, bool) else f.gen
    if gen != f.gen:
        return  # an older attempt's late word: its time is over
    t = amount(fields.get("time"))
    g = f.of(gen)
    if ev.kind == "train_started":
        restore = amount(fields.get("restore_s")) or 0.0
        if t is not None:
            if restore:
                f.mark(t - restore, "restore")
            f.mark(t, TRAINING)
        restored = _step(fields.get("restored_step"))
        if g.restored is None and restored is not None:
            g.restored = restored
        g.reached = max(g.reached, restored or 0)
        g.started_training = True
    elif ev.kind == "world_waiting":
        f.mark(t, "waiting_for_capacity")
    elif ev.kind == "checkpoint_committed":
        step = _step(fields.get("step"))
        if step is not None:
            g.reached = max(g.reached, step)
        stall = amount(fields.get("stall_s"))
        if stall is not None and stall < 86_400:
            g.stall_s += stall


def run_config(events: Iterable[Event]) -> Mapping[str, Any]:
    """The run's config as its journal holds it (its first run_started's)."""
    for ev in events:
        if isinstance(ev, RunStarted) and isinstance(ev.config, Mapping):
            return ev.config
    return {}


def journal_goodput(events: list[Event], now: float | None = None) -> Goodput:
    """``goodput_of`` priced and sized from the run's own config in the journal."""
    from providers.prices import region_nodes, region_prices

    config = run_config(events)
    return goodput_of(events, region_prices(config), region_nodes(config), now)
