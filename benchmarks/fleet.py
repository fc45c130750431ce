"""Fleet simulation: spot preemptions and region outages replayed through the recovery
decision code, per placement policy: goodput, dollars per run and deadline misses.

    python benchmarks/fleet.py [--runs 1000] [--seed 0] [--trace CSV] [--json PATH]

Every run trains ``work`` hours (2-12 h, checkpoint every 15 min) on spot capacity in one
of five regions priced from the shipped catalog snapshot (AWS m6i.xlarge in us-east-1,
us-west-2, eu-west-1; GCP n2-standard-4 in us-central1, europe-west4; spot and
on-demand). Each run meets its own draw of the fleet: a spot preemption rate per region,
log-uniform in 0.02-0.6 an hour (GPU spot is reclaimed every few hours to every few days
in the traces of "Can't Be Late", NSDI '24), and outages per geography (cloud and
continent) at one per 500 hours, 0.5-3 h long, that take every region there down. A
``--trace`` CSV (``time_h,region,event`` with event ``preempt``, ``outage_start`` or
``outage_end``) replaces the synthetic trace for every run; ``--reclaim-gap-h`` leaves a
region without spot capacity for a while after each reclaim (exponential, that mean).
Restart times (provisioning,
start-up, restore) are drawn around this project's measured figures (docs/benchmarks:
``vs_skypilot.json``'s cluster-up, ``recovery-digits.json``'s start-up and restore), 0.5x
to 1.5x.

Placement policies, each through ``recovery.policy.FailurePolicy`` (the controller's):

- ``listed``: cloud.candidates in their order (recovery.placement=listed);
- ``cheapest``: the cheapest spot region first and, on a loss, the cheapest other one
  (SkyPilot managed jobs' EAGER_NEXT_REGION), no cooldown;
- ``cost``: recovery.placement=cost (``recovery/placement.py``), the user having declared
  each region's rate within a factor of two of the truth, learned further from the run.

A share of the runs (``--deadline-share``, 0.5) has a deadline of 1.2-2x its work; those
leave spot for on-demand by ``recovery/deadline.py``: ``greedy`` (only once the slack would
not absorb one more loss) under every policy, and Uniform Progress as a fourth row
(``cost+up``). The same trace and draws serve every policy (common random numbers).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import write_json  # noqa: E402
from providers.prices import catalog_price, egress_usd_per_gb  # noqa: E402
from recovery.deadline import wants_on_demand  # noqa: E402
from recovery.detection import Failure, FailureKind  # noqa: E402
from recovery.placement import Outlook, Score, geography, learned_rate, rank  # noqa: E402
from recovery.policy import Action, Budgets, FailurePolicy, History  # noqa: E402

FLEET = (
    ("us-east-1", "aws/us-east-1", "m6i.xlarge"),
    ("us-west-2", "aws/us-west-2", "m6i.xlarge"),
    ("eu-west-1", "aws/eu-west-1", "m6i.xlarge"),
    ("us-central1", "gcp/us-central1", "n2-standard-4"),
    ("europe-west4", "gcp/europe-west4", "n2-standard-4"),
)
INTERVAL_H = 0.25
COPY_MB_S = 100.0  # a checkpoint copied between regions (the controller's own assumption)
OUTAGE_PER_H = 1 / 500
HORIZON_FACTOR = 8  # traces cover this many times a run's work
POLICIES = ("listed", "cheapest", "cost", "cost+up")


@dataclass(frozen=True)
class Region:
    name: str
    infra: str
    spot_usd: float
    on_demand_usd: float


def fleet() -> list[Region]:
    out = []
    for name, infra, instance in FLEET:
        spot = catalog_price(infra, instance, "", True).usd_per_hour
        od = catalog_price(infra, instance, "", False).usd_per_hour
        if spot is None or od is None:
            raise SystemExit(f"{name}: {instance} is not in the catalog snapshot")
        out.append(Region(name, infra, spot, od))
    return out


def measured_setup_s() -> float:
    """Provisioning, start-up and restore as this project measured them (seconds)."""
    bench = REPO / "docs" / "benchmarks"
    try:
        vs = json.loads((bench / "vs_skypilot.json").read_text())
        rec = json.loads((bench / "recovery-digits.json").read_text())
        return float(vs["cluster_up_ours_s"]) + float(rec["cold_runtime_startup_s"]) + float(rec["cold_restore_s"])
    except (OSError, KeyError, ValueError):
        return 35.0


@dataclass
class Trace:
    """When each region is preempted (spot) and down (an outage), in hours from the start."""

    preempt: dict[str, list[float]] = field(default_factory=dict)
    down: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    # Spans with no spot capacity left after a reclaim (--reclaim-gap-h): spot launches refused.
    dry: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def outage_at(self, region: str, t: float, spot: bool = False) -> float | None:
        """When the outage ``region`` is in at ``t`` ends (for a spot launch, a span with no
        spot capacity too); None when it is up."""
        spans = [*self.down.get(region, []), *(self.dry.get(region, []) if spot else [])]
        return max((end for start, end in spans if start <= t < end), default=None)

    def next_loss(self, region: str, t: float, spot: bool) -> float:
        times = [s for s, _ in self.down.get(region, []) if s > t]
        if spot:
            times += [p for p in self.preempt.get(region, []) if p > t]
        return min(times, default=math.inf)


def synthetic(
    rng: random.Random, regions: list[Region], rates: dict[str, float], horizon: float, reclaim_gap_h: float = 0.0
) -> Trace:
    tr = Trace()
    for r in regions:
        t, times = 0.0, []
        while (t := t + rng.expovariate(rates[r.name])) < horizon:
            times.append(t)
            if reclaim_gap_h > 0:
                tr.dry.setdefault(r.name, []).append((t, t + rng.expovariate(1 / reclaim_gap_h)))
        tr.preempt[r.name] = times
    for geo in sorted({g for r in regions if (g := geography(r.infra)) is not None}):
        t = 0.0
        while (t := t + rng.expovariate(OUTAGE_PER_H)) < horizon:
            span = (t, t + rng.uniform(0.5, 3.0))
            for r in regions:
                if geography(r.infra) == geo:
                    tr.down.setdefault(r.name, []).append(span)
    return tr


def from_csv(path: str, regions: list[Region]) -> Trace:
    names = {r.name for r in regions}
    tr, open_at = Trace(), {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            t, region, event = float(row["time_h"]), row["region"], row["event"]
            if region not in names:
                raise SystemExit(f"{path}: region {region!r} is none of {', '.join(sorted(names))}")
            if event == "preempt":
                tr.preempt.setdefault(region, []).append(t)
            elif event == "outage_start":
                open_at[region] = t
            elif event == "outage_end" and region in open_at:
                tr.down.setdefault(region, []).append((open_at.pop(region), t))
            else:
                raise SystemExit(f"{path}: event {event!r} at {t} h: expected preempt, outage_start or outage_end")
    for region, start in open_at.items():
        tr.down.setdefault(region, []).append((start, math.inf))
    return tr


@dataclass
class Outcome:
    wall_h: float
    usd: float
    missed: bool
    losses: int


@dataclass
class Run:
    work_h: float
    setup_h: float
    deadline_h: float | None
    declared: dict[str, float]
    checkpoint_gb: float = 0.0


def fetch(regions: dict[str, Region], holder: str | None, to: str, gb: float) -> tuple[float, float]:
    """(hours, USD) of bringing the newest checkpoint from ``holder``'s store to ``to``."""
    if holder is None or holder == to:
        return 0.0, 0.0
    return gb * 1000 / COPY_MB_S / 3600, gb * egress_usd_per_gb(regions[holder].infra, regions[to].infra)


def _ranker(  # type: ignore[no-untyped-def]
    policy: str, regions: list[Region], run: Run, seen: dict[str, tuple[int, float]], left: list[float], held: list
):
    by = {r.name: r for r in regions}

    def by_price(lost: str | None) -> list[Score]:
        # No loss rate, no egress, the same set-up everywhere: the ranking is the spot price's,
        # the region just lost last (EAGER_NEXT_REGION: away from it first, whatever the loss).
        outlooks = [Outlook(r.name, r.spot_usd, 0.0, run.setup_h * 3600, 0.0, 0.0) for r in regions]
        table = rank(outlooks, left[0], INTERVAL_H)
        return [s for s in table if s.region != lost] + [s for s in table if s.region == lost]

    def by_cost(lost: str | None) -> list[Score]:
        lost_geo = geography(by[lost].infra) if lost else None
        outlooks = []
        for r in regions:
            copy_h, egress = fetch(by, held[0], r.name, run.checkpoint_gb)
            outlooks.append(
                Outlook(
                    r.name,
                    r.spot_usd,
                    learned_rate(run.declared[r.name], *seen.get(r.name, (0, 0.0))),
                    run.setup_h * 3600,
                    0.0,
                    copy_h * 3600,
                    egress_usd=egress,
                    checkpoint_from=held[0],
                    correlated=r.name != lost and lost_geo is not None and geography(r.infra) == lost_geo,
                )
            )
        return rank(outlooks, left[0], INTERVAL_H, correlated_rate_per_h=0.5)

    return None if policy == "listed" else by_price if policy == "cheapest" else by_cost


def simulate(policy: str, regions: list[Region], run: Run, trace: Trace) -> Outcome:
    """One run under ``policy``: where it trains, what it loses, what it pays. A cluster is
    paid from its launch to its loss or the run's end; progress since the last checkpoint
    is lost with it. A deadline run chooses spot or on-demand at each launch and at each
    checkpoint (a switch is a restart in the same region)."""
    seen: dict[str, tuple[int, float]] = {}  # region -> (losses, hours there), as the run learns
    left = [run.work_h]
    held: list[str | None] = [None]  # the region whose store holds the newest checkpoint
    cooldown = 0.0 if policy == "cheapest" else 600.0
    budgets = Budgets(10**6, 0, cooldown, max_preemptions=10**6)
    fp = FailurePolicy([r.name for r in regions], budgets, _ranker(policy, regions, run, seen, left, held))
    by = {r.name: r for r in regions}
    region, _ = fp.first_placement()
    history = History()
    rule = "uniform_progress" if policy == "cost+up" else "greedy"
    t = done = usd = 0.0
    losses, on_demand, up_since = 0, False, None
    limit = run.work_h * HORIZON_FACTOR

    def wants(now_on_demand: bool) -> bool:
        if run.deadline_h is None:
            return False
        return wants_on_demand(
            rule,
            done_s=done * 3600,
            work_s=run.work_h * 3600,
            elapsed_s=t * 3600,
            allowed_s=run.deadline_h * 3600,
            restart_s=run.setup_h * 3600,
            interval_s=INTERVAL_H * 3600,
            on_demand_now=now_on_demand,
        )

    def note(hours: float, lost: bool) -> None:
        n, h = seen.get(region, (0, 0.0))
        seen[region] = (n + int(lost), h + hours)

    while done < run.work_h - 1e-9 and t < limit:
        price = by[region].on_demand_usd if on_demand else by[region].spot_usd
        failure: Failure | None = None
        if up_since is None:
            on_demand = wants(on_demand)
            price = by[region].on_demand_usd if on_demand else by[region].spot_usd
            if (end := trace.outage_at(region, t, spot=not on_demand)) is not None:
                t += min(run.setup_h, end - t)  # a launch tried and refused: no capacity there
                failure = Failure(FailureKind.NO_CAPACITY, region, "outage")
            else:
                copy_h, egress = fetch(by, held[0], region, run.checkpoint_gb) if done > 0 else (0.0, 0.0)
                setup = run.setup_h + copy_h
                loss = trace.next_loss(region, t, not on_demand)
                if loss < t + setup:
                    usd += price * (loss - t)
                    note(loss - t, True)
                    t = loss
                    failure = Failure(FailureKind.PREEMPTED, region, "lost while starting")
                else:
                    usd += price * setup + egress
                    note(setup, False)
                    t += setup
                    up_since = t
                    if done > 0:
                        held[0] = region  # restored here: the copy is this region's now
                    continue
        else:
            to_go = run.work_h - done
            if run.deadline_h is not None:
                to_go = min(to_go, INTERVAL_H - math.fmod(done, INTERVAL_H) or INTERVAL_H)
            loss = trace.next_loss(region, t, not on_demand)
            if loss < t + to_go:
                reached = math.floor((done + (loss - t)) / INTERVAL_H + 1e-9) * INTERVAL_H
                if reached > done:
                    held[0] = region  # a newer checkpoint, committed to this region's store
                done = reached
                usd += price * (loss - t)
                note(loss - t, True)
                t, up_since = loss, None
                outage = trace.outage_at(region, t + 1e-9) is not None
                failure = Failure(FailureKind.CLUSTER_LOST if outage else FailureKind.PREEMPTED, region, "lost")
            else:
                usd += price * to_go
                note(to_go, False)
                t += to_go
                done += to_go
                held[0] = region
                if done < run.work_h - 1e-9 and wants(on_demand) != on_demand:
                    up_since = None  # leave for the other capacity: a restart in this region
                continue
        losses += 1
        left[0] = run.work_h - done
        decision = fp.make_decision(failure, history, t * 3600)
        history = history.after(failure, decision, t * 3600)
        if decision.action is Action.FAILOVER and decision.region:
            region = decision.region
        elif decision.action is Action.GIVE_UP:
            t += 0.25  # every other region cooling down: wait, then the best placement again
            region, _ = fp.first_placement()
    missed = run.deadline_h is not None and t > run.deadline_h + 1e-9
    return Outcome(t, usd, missed or done < run.work_h - 1e-9, losses)


def draw(
    rng: random.Random, regions: list[Region], setup_s: float, deadline_share: float
) -> tuple[Run, dict[str, float]]:
    rates = {r.name: math.exp(rng.uniform(math.log(0.02), math.log(0.6))) for r in regions}
    work = rng.uniform(2.0, 12.0)
    run = Run(
        work_h=work,
        setup_h=setup_s * rng.uniform(0.5, 1.5) / 3600,
        deadline_h=work * rng.uniform(1.2, 2.0) if rng.random() < deadline_share else None,
        declared={n: rate * math.exp(rng.uniform(-math.log(2), math.log(2))) for n, rate in rates.items()},
        # Model and optimizer state, 1-50 GB (a 1B-parameter model with Adam is about 16 GB).
        checkpoint_gb=math.exp(rng.uniform(math.log(1.0), math.log(50.0))),
    )
    return run, rates


def fleet_figures(
    runs: int,
    seed: int,
    deadline_share: float,
    trace_csv: str | None = None,
    setup_scale: float = 1.0,
    reclaim_gap_h: float = 0.0,
) -> dict[str, float | int]:
    regions = fleet()
    setup_s = measured_setup_s() * setup_scale
    rng = random.Random(seed)
    given = from_csv(trace_csv, regions) if trace_csv else None
    totals = {p: {"wall": 0.0, "work": 0.0, "usd": 0.0, "missed": 0, "deadline_runs": 0, "losses": 0} for p in POLICIES}
    cheapest_spot = min(r.spot_usd for r in regions)
    floor = 0.0
    for _ in range(runs):
        run, rates = draw(rng, regions, setup_s, deadline_share)
        # What no policy can beat: the work on the cheapest spot capacity, never lost.
        floor += run.work_h * cheapest_spot
        trace = given or synthetic(rng, regions, rates, run.work_h * HORIZON_FACTOR, reclaim_gap_h)
        for p in POLICIES:
            out = simulate(p, regions, run, trace)
            tot = totals[p]
            tot["wall"] += out.wall_h
            tot["work"] += run.work_h
            tot["usd"] += out.usd
            tot["losses"] += out.losses
            tot["deadline_runs"] += int(run.deadline_h is not None)
            tot["missed"] += int(out.missed)
    figures: dict[str, float | int] = {
        "runs": runs,
        "seed": seed,
        "setup_s": round(setup_s, 1),
        "reclaim_gap_h": reclaim_gap_h,
    }
    for p, tot in totals.items():
        key = p.replace("+", "_")
        figures[f"goodput_{key}"] = round(tot["work"] / tot["wall"], 4)
        figures[f"usd_per_run_{key}"] = round(tot["usd"] / runs, 4)
        figures[f"deadline_misses_{key}"] = int(tot["missed"])
        figures[f"losses_per_run_{key}"] = round(tot["losses"] / runs, 3)
    figures["deadline_runs"] = int(totals["cost"]["deadline_runs"])
    figures["usd_per_run_floor"] = round(floor / runs, 4)
    # The least any policy's $ per run can be against cheapest-first's on this fleet.
    figures["floor_vs_cheapest_usd_ratio"] = round(floor / runs / figures["usd_per_run_cheapest"], 4)
    figures["cost_vs_cheapest_usd_ratio"] = round(figures["usd_per_run_cost"] / figures["usd_per_run_cheapest"], 4)
    figures["cost_vs_cheapest_goodput_ratio"] = round(figures["goodput_cost"] / figures["goodput_cheapest"], 4)
    return figures


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deadline-share", type=float, default=0.5)
    ap.add_argument("--trace", metavar="CSV", help="time_h,region,event rows to replay instead of a synthetic trace")
    ap.add_argument(
        "--setup-scale", type=float, default=1.0, help="restart times as measured here, times this (cloud VMs: 5-10)"
    )
    ap.add_argument(
        "--reclaim-gap-h",
        type=float,
        default=0.0,
        help="after each reclaim, no spot capacity in its region for this many hours on average (exponential)",
    )
    ap.add_argument("--json", metavar="PATH", help="write the figures and ratios there (flat keys)")
    args = ap.parse_args(argv)
    if args.runs < 1 or not 0 <= args.deadline_share <= 1 or not 0 < args.setup_scale <= 1000:
        raise SystemExit("--runs must be at least 1, --deadline-share in 0..1 and --setup-scale in (0, 1000]")
    if not 0 <= args.reclaim_gap_h <= 1000:
        raise SystemExit("--reclaim-gap-h must be in 0..1000 hours")
    figures = fleet_figures(args.runs, args.seed, args.deadline_share, args.trace, args.setup_scale, args.reclaim_gap_h)
    print(f"{'policy':<10}{'goodput':>9}{'$/run':>10}{'misses':>8}{'losses':>8}")
    for p in POLICIES:
        k = p.replace("+", "_")
        print(
            f"{p:<10}{figures[f'goodput_{k}']:>9.3f}{figures[f'usd_per_run_{k}']:>10.3f}"
            f"{figures[f'deadline_misses_{k}']:>8}{figures[f'losses_per_run_{k}']:>8.2f}"
        )
    print(
        f"cost vs cheapest-first: {figures['cost_vs_cheapest_usd_ratio']:.3f}x the $ per run, "
        f"{figures['cost_vs_cheapest_goodput_ratio']:.3f}x the goodput ({figures['deadline_runs']} deadline runs)"
    )
    print(
        f"floor (the work on the cheapest spot, never lost): {figures['usd_per_run_floor']:.3f} $/run, "
        f"{figures['floor_vs_cheapest_usd_ratio']:.3f}x cheapest-first's: no policy can do better here"
    )
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
