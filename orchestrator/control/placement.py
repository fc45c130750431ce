"""recovery.placement=cost: each candidate measured and priced for recovery/placement.py
to rank, from the run's config and what its journal says so far (its provisioning,
start-up and restore times, its step time, where its newest checkpoint is, the losses it
met in each region) and what the home's earlier runs met there. The same for the first
placement, each failover and ``action=plan``.

Where the journal has not measured something yet, every candidate gets the same guess,
so it weighs nothing in the ranking: a provisioning time no region has shown, a step
time before any step (``DEFAULT_STEP_S``)."""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.derived import total_steps
from orchestrator.config.schema import Config
from orchestrator.runstate import rundir
from orchestrator.runstate.events import (
    AttemptEnded,
    AttemptStarted,
    CapacityChosen,
    Event,
    FailureDetected,
    Provisioned,
    Replicated,
    RunStarted,
    RuntimeReport,
)
from orchestrator.runstate.goodput import amount
from orchestrator.runstate.journal import DamagedFile, read_typed
from providers.prices import egress_usd_per_gb, node_price
from recovery.deadline import loss_and_restart_s, must_go_on_demand, slack_s, uniform_line, wants_on_demand
from recovery.placement import Outlook, Score, geography, learned_rate, rank
from recovery.policy import Ranker

# Seconds a step takes before the run has trained one (then: its own measured time).
DEFAULT_STEP_S = 1.0
# MB/s of a checkpoint copied between regions when none was measured.
CROSS_REGION_MB_S = 100.0
# Failures that are not the region's doing: they say nothing of its loss rate.
_NOT_THE_REGIONS = frozenset({"user_error", "controller_lost", "runtime_lost", "precheck"})


@dataclass
class Measured:
    """What the journal has shown so far."""

    provision_s: dict[str, list[float]] = field(default_factory=dict)
    startup_s: list[float] = field(default_factory=list)
    restore_s: list[float] = field(default_factory=list)
    step_s: float | None = None
    newest_step: int = 0
    newest_bytes: int = 0
    holders: set[str] = field(default_factory=set)
    losses: dict[str, int] = field(default_factory=dict)
    hours: dict[str, float] = field(default_factory=dict)


def measured(events: Sequence[Event], now: float | None = None) -> Measured:
    m = Measured()
    provisioned_at: dict[int, float] = {}
    started: dict[int, tuple[str, float]] = {}
    trained_from: dict[int, tuple[float, int]] = {}
    checkpoints: dict[int, tuple[int, set[str]]] = {}
    gen_region: dict[int, str] = {}
    last_ts = 0.0
    for ev in events:
        last_ts = max(last_ts, ev.ts)
        if isinstance(ev, AttemptStarted):
            started[ev.generation] = (ev.region, ev.ts)
            gen_region[ev.generation] = ev.region
        elif isinstance(ev, AttemptEnded) and ev.generation in started:
            region, t0 = started.pop(ev.generation)
            m.hours[region] = m.hours.get(region, 0.0) + max(0.0, ev.ts - t0) / 3600
        elif isinstance(ev, Provisioned) and ev.purpose == "attempt":
            if (p := amount(ev.provision_s)) is not None:
                m.provision_s.setdefault(ev.region, []).append(p)
            if ev.generation is not None:
                provisioned_at[ev.generation] = ev.ts
        elif isinstance(ev, FailureDetected) and ev.region and ev.kind not in _NOT_THE_REGIONS:
            m.losses[ev.region] = m.losses.get(ev.region, 0) + 1
        elif isinstance(ev, Replicated) and isinstance(ev.step, int) and ev.to:
            checkpoints.setdefault(ev.step, (0, set()))[1].add(ev.to)
        elif isinstance(ev, RuntimeReport) and ev.fields.get("by", "runtime") == "runtime":
            f, gen = ev.fields, ev.fields.get("generation")
            t = amount(f.get("time"))
            if ev.kind == "train_started" and isinstance(gen, int) and t is not None:
                restore = amount(f.get("restore_s")) or 0.0
                if restore:
                    m.restore_s.append(restore)
                if gen in provisioned_at:
                    m.startup_s.append(max(0.0, t - restore - provisioned_at[gen]))
                restored = f.get("restored_step")
                trained_from[gen] = (t, restored if isinstance(restored, int) else 0)
            elif ev.kind == "checkpoint_committed" and isinstance(f.get("step"), int):
                step, size = f["step"], f.get("bytes")
                entry = checkpoints.setdefault(step, (0, set()))
                checkpoints[step] = (size if isinstance(size, int) and size > 0 else entry[0], entry[1])
                if isinstance(f.get("region"), str):
                    entry[1].add(f["region"])
                if isinstance(gen, int) and gen in trained_from and t is not None:
                    t0, s0 = trained_from[gen]
                    if step > s0 and t > t0:
                        m.step_s = (t - t0) / (step - s0)
            elif ev.kind == "replicated" and isinstance(f.get("step"), int) and isinstance(f.get("to"), str):
                checkpoints.setdefault(f["step"], (0, set()))[1].add(f["to"])
    end = now if now is not None else last_ts
    for region, t0 in started.values():
        m.hours[region] = m.hours.get(region, 0.0) + max(0.0, end - t0) / 3600
    if checkpoints:
        m.newest_step = max(checkpoints)
        m.newest_bytes, m.holders = checkpoints[m.newest_step][0], set(checkpoints[m.newest_step][1])
    return m


@dataclass(frozen=True)
class Exposure:
    """The losses each region dealt and the hours spent there, by this home's past runs:
    evidence for a region's loss rate beside the run's own (``learned_rate``)."""

    losses: dict[str, int] = field(default_factory=dict)
    hours: dict[str, float] = field(default_factory=dict)
    runs: int = 0


NO_EXPOSURE = Exposure()
# The newest past runs read, and the largest journal read of one: a bounded look back,
# at the run's start (and once per action=plan), never at a failover.
MAX_PAST_RUNS = 50
MAX_PAST_JOURNAL_BYTES = 16 * 1024 * 1024


def home_exposure(home: str, exclude: str | None = None) -> Exposure:
    """What the newest ``MAX_PAST_RUNS`` runs under ``home`` (``exclude`` not among them)
    met in each region. A journal that cannot be read, is too large or is damaged is
    passed over: it is evidence, never a reason to stop."""
    runs_dir = rundir.runs_path(home)
    try:
        names = [n for n in os.listdir(runs_dir) if n != exclude]
    except OSError:
        return NO_EXPOSURE
    journals = []
    for name in names:
        path = rundir.journal_path(os.path.join(runs_dir, name))
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_PAST_JOURNAL_BYTES:
            journals.append((st.st_mtime, path))
    losses: dict[str, int] = {}
    hours: dict[str, float] = {}
    runs = 0
    for _mtime, path in sorted(journals, reverse=True)[:MAX_PAST_RUNS]:
        try:
            events = list(read_typed(path))
        except (DamagedFile, OSError, ValueError):
            continue
        if not events:
            continue  # nothing a run journals: no evidence
        m = measured(events)
        runs += 1
        for region, n in m.losses.items():
            losses[region] = losses.get(region, 0) + n
        for region, h in m.hours.items():
            hours[region] = hours.get(region, 0.0) + h
    return Exposure(losses, hours, runs)


def _mean(values: Sequence[float], default: float = 0.0) -> float:
    return sum(values) / len(values) if values else default


def outlooks(cfg: Config, m: Measured, lost: str | None, past: Exposure = NO_EXPOSURE) -> list[Outlook]:
    """Each candidate as ``m`` and the config show it, ``lost`` the region just lost;
    ``past``: what the home's earlier runs met, weighed with the run's own losses."""
    regions = cfg.cloud.regions
    every_provision = [p for ps in m.provision_s.values() for p in ps]
    lost_geo = geography(regions[lost].infra) if lost in regions else None
    out = []
    for name in cfg.candidate_regions():
        rc = regions[name]
        price = node_price(name, dataclasses.asdict(rc)).usd_per_hour
        provision = _mean(m.provision_s.get(name, []), _mean(every_provision))
        restore = _mean(m.restore_s)
        egress = 0.0
        source: str | None = None
        if m.newest_step and m.holders:
            if name in m.holders:
                source = name
            else:
                # The nearest holder: the cheapest to copy from (listed order breaks ties).
                holders = [h for h in cfg.candidate_regions() if h in m.holders] or sorted(m.holders)
                source = min(holders, key=lambda h: egress_usd_per_gb(_infra(cfg, h), rc.infra))
                gb = m.newest_bytes / 1e9
                egress = gb * egress_usd_per_gb(_infra(cfg, source), rc.infra)
                restore += m.newest_bytes / (CROSS_REGION_MB_S * 1e6)
        geo = geography(rc.infra)
        out.append(
            Outlook(
                region=name,
                usd_per_hour=None if price is None else price * rc.node_count(),
                rate_per_h=learned_rate(
                    rc.preemption_rate_per_h,
                    m.losses.get(name, 0) + past.losses.get(name, 0),
                    m.hours.get(name, 0.0) + past.hours.get(name, 0.0),
                ),
                provision_s=provision,
                startup_s=_mean(m.startup_s),
                restore_s=restore,
                egress_usd=egress,
                checkpoint_from=source,
                correlated=name != lost and geo is not None and geo == lost_geo,
            )
        )
    return out


def _infra(cfg: Config, region: str) -> str:
    rc = cfg.cloud.regions.get(region)
    return rc.infra if rc is not None else ""


def ranking(
    cfg: Config,
    events: Sequence[Event],
    lost: str | None,
    now: float | None = None,
    past: Exposure = NO_EXPOSURE,
) -> list[Score]:
    """Every candidate, best first, for a run whose journal holds ``events`` (and whose
    home's earlier runs met ``past``)."""
    m = measured(events, now)
    step_s = m.step_s if m.step_s is not None else DEFAULT_STEP_S
    total = total_steps(cfg) or cfg.job.steps
    work_h = max(0, total - m.newest_step) * step_s / 3600
    interval_h = cfg.checkpoint.interval_steps * step_s / 3600
    return rank(outlooks(cfg, m, lost, past), work_h, interval_h, cfg.recovery.correlated_rate_per_h)


def cost_ranker(cfg: Config, journal: str, past: Exposure = NO_EXPOSURE) -> Ranker:
    """The ranker the failure policy asks at the first placement and each failover: the
    run's journal read again each time (a rare moment), a damaged one as no history;
    ``past``: the home's earlier runs, read once when the run starts."""

    def ranker(lost: str | None) -> list[Score]:
        try:
            events = list(read_typed(journal))
        except (DamagedFile, OSError):
            events = []
        return ranking(cfg, events, lost, past=past)

    return ranker


def ranking_lines(table: Sequence[Score | dict[str, Any]]) -> list[str]:
    """The ranking as ``action=plan`` prints it (a decision's table reads the same)."""
    lines = [f"  {'':2}{'region':<16}{'$/h':>9}{'loss/h':>8}{'setup':>8}{'hours':>9}{'$ to finish':>13}  checkpoint"]
    for i, s in enumerate(table):
        d = s.as_dict() if isinstance(s, Score) else s
        usd_h, hours, usd = d.get("usd_per_hour"), d.get("expected_hours"), d.get("expected_usd")
        where = d.get("checkpoint_from") or "-"
        lines.append(
            f"  {'*' if i == 0 else '':2}{str(d.get('region'))[:15]:<16}"
            f"{'-' if usd_h is None else f'{usd_h:.4f}':>9}{d.get('rate_per_h', 0):>8.3f}"
            f"{d.get('setup_s', 0):>7.0f}s{'never' if hours is None else f'{hours:.3f}':>9}"
            f"{'-' if usd is None else f'{usd:.4f}':>13}  {where}"
            + ("  (shares the lost region's fate)" if d.get("correlated") else "")
        )
    return lines


# Seconds a restart takes (provisioning, start-up, restore) before the run has measured one.
DEFAULT_RESTART_S = 60.0


@dataclass(frozen=True)
class Capacity:
    """What a deadline run's next attempt runs on, and why (journaled as ``capacity``)."""

    spot: bool
    reason: str
    slack_s: float | None = None
    needed_s: float | None = None


def capacity_for(cfg: Config, events: Sequence[Event], region: str, now: float) -> Capacity | None:
    """Spot or on-demand for the next attempt in ``region`` under recovery.deadline_s; None
    where no deadline is set or the region is not spot (nothing to choose)."""
    rc = cfg.cloud.regions.get(region)
    deadline = cfg.recovery.deadline_s
    if rc is None or not rc.use_spot or deadline <= 0:
        return None
    m = measured(events, now)
    if m.step_s is None:
        return Capacity(True, "no step measured yet: the slack cannot be told, spot")
    started = next((ev.ts for ev in events if isinstance(ev, RunStarted)), now)
    restart = (
        _mean([p for ps in m.provision_s.values() for p in ps], DEFAULT_RESTART_S)
        + _mean(m.startup_s)
        + _mean(m.restore_s)
    )
    interval = cfg.checkpoint.interval_steps * m.step_s
    work = (total_steps(cfg) or cfg.job.steps) * m.step_s
    done = m.newest_step * m.step_s
    elapsed = max(0.0, now - started)
    on_demand_now = next((not ev.spot for ev in reversed(events) if isinstance(ev, CapacityChosen)), False)
    policy = str(cfg.recovery.deadline_policy)
    slack = slack_s(deadline, elapsed, work - done)
    needed = loss_and_restart_s(restart, interval)
    od = wants_on_demand(
        policy,
        done_s=done,
        work_s=work,
        elapsed_s=elapsed,
        allowed_s=deadline,
        restart_s=restart,
        interval_s=interval,
        on_demand_now=on_demand_now,
    )
    if not od:
        why = f"{slack:.0f} s of slack absorbs another loss and restart ({needed:.0f} s)"
    elif must_go_on_demand(slack, restart, interval):
        why = f"{slack:.0f} s of slack would not absorb another loss and restart ({needed:.0f} s)"
    else:
        line = uniform_line(work, elapsed, deadline, restart)
        why = f"behind uniform progress: {done:.0f} s of {work:.0f} s of training done, {line:.0f} s due by now"
    return Capacity(not od, why, round(slack, 3), round(needed, 3))
