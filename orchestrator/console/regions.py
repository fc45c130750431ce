"""The regions page: each region across every run of the home: its recent failures, how
long its clusters took to provision, the provisioning it refused, and its price.

Each run's journal is folded once (``read_typed``, its events of
``orchestrator.runstate.events``) and kept while it stays as it was; the price is
``providers.prices.node_price`` of the region as the newest run that names it configured it.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.console.runs import Stamp, run_href, stamp
from orchestrator.console.text import age, clock, cut, seconds
from orchestrator.runstate import rundir
from orchestrator.runstate.events import (
    AttemptStarted,
    Event,
    FailureDetected,
    NodeLost,
    Provisioned,
    ProvisionFailed,
    ProvisionRetry,
    RunStarted,
)
from orchestrator.runstate.journal import read_typed
from orchestrator.runstate.runfiles import DamagedFile
from providers.prices import node_price

# Failures that are not the region's doing (as recovery.placement=cost counts a region's
# losses, orchestrator/control/placement.py): they say nothing of the region.
NOT_THE_REGIONS = frozenset({"user_error", "controller_lost", "runtime_lost", "precheck"})
# The newest failures shown per region.
RECENT = 10
# The most regions one run may add (a journal someone wrote can name thousands).
MAX_REGIONS_PER_RUN = 50


@dataclass(frozen=True)
class Failure:
    at: float
    run_id: str
    kind: str
    detail: str


@dataclass
class RegionSeen:
    """What one run's journal says of one region."""

    attempts: int = 0
    provision_s: list[tuple[float, float]] = field(default_factory=list)  # (when, seconds)
    refused: int = 0  # provisioning tries the provider refused or failed
    failures: list[Failure] = field(default_factory=list)


@dataclass(frozen=True)
class RunRegions:
    """One run's journal, folded by region; ``config`` the regions as it configured them."""

    started_at: float
    regions: dict[str, RegionSeen]
    config: dict[str, dict[str, Any]]


def _region(value: object) -> str | None:
    return value[:100] if isinstance(value, str) and value else None


def fold_run(run_id: str, events: Iterable[Event]) -> RunRegions:
    """One run's events by region (pure)."""
    seen: dict[str, RegionSeen] = {}
    started, config = 0.0, {}

    def of(name: str | None) -> RegionSeen | None:
        if name is None or (name not in seen and len(seen) >= MAX_REGIONS_PER_RUN):
            return None
        return seen.setdefault(name, RegionSeen())

    for ev in events:
        if isinstance(ev, RunStarted):
            started = started or ev.ts
            cloud = ev.config.get("cloud") if isinstance(ev.config.get("cloud"), dict) else {}
            regions = cloud.get("regions") if isinstance(cloud.get("regions"), dict) else {}
            config = {str(n)[:100]: r for n, r in list(regions.items())[:MAX_REGIONS_PER_RUN] if isinstance(r, dict)}
        elif isinstance(ev, AttemptStarted) and (r := of(_region(ev.region))):
            r.attempts += 1
        elif isinstance(ev, Provisioned) and ev.purpose == "attempt" and (r := of(_region(ev.region))):
            if isinstance(ev.provision_s, int | float) and ev.provision_s >= 0 and ev.kept_from is None:
                r.provision_s.append((ev.ts, float(ev.provision_s)))
        elif isinstance(ev, ProvisionFailed | ProvisionRetry) and (r := of(_region(ev.region))):
            r.refused += 1
            if isinstance(ev, ProvisionFailed):
                r.failures.append(Failure(ev.ts, run_id, ev.kind or "provision_failed", ev.error or ""))
        elif isinstance(ev, FailureDetected) and ev.kind not in NOT_THE_REGIONS and (r := of(_region(ev.region))):
            r.failures.append(Failure(ev.ts, run_id, ev.kind, ev.detail or ""))
        elif isinstance(ev, NodeLost) and (r := of(_region(ev.region))):
            r.failures.append(Failure(ev.ts, run_id, "node_lost", f"node {ev.node}: {ev.detail or ev.health}"))
    for r in seen.values():
        r.failures = r.failures[-RECENT:]  # the page shows the newest RECENT of all runs' together
    return RunRegions(started, seen, config)


@dataclass
class RegionRow:
    name: str
    runs: int = 0
    attempts: int = 0
    provision_s: list[tuple[float, float]] = field(default_factory=list)  # (when, seconds)
    refused: int = 0
    failures: list[Failure] = field(default_factory=list)
    price: str = "-"
    price_source: str = ""


def region_rows(runs: Iterable[RunRegions]) -> list[RegionRow]:
    """Every region across the runs, by name, priced as the newest run that names it
    configured it (priced once per region: a catalog look-up reads a whole table)."""
    rows: dict[str, RegionRow] = {}
    newest: dict[str, tuple[float, dict[str, Any]]] = {}
    for run in runs:
        for name, seen in run.regions.items():
            row = rows.setdefault(name, RegionRow(name))
            row.runs += 1
            row.attempts += seen.attempts
            row.provision_s += seen.provision_s
            row.refused += seen.refused
            row.failures += seen.failures
        for name, cfg in run.config.items():
            rows.setdefault(name, RegionRow(name))
            if name not in newest or run.started_at >= newest[name][0]:
                newest[name] = (run.started_at, cfg)
    for name, (_, cfg) in newest.items():
        price = node_price(name, cfg)
        rows[name].price = "-" if price.usd_per_hour is None else f"${price.usd_per_hour:.4g}/node-h"
        rows[name].price_source = cut(price.source, 200)
    return [rows[n] for n in sorted(rows)]


def region_json(row: RegionRow, now: float) -> dict[str, Any]:
    """A region as the page and ``/api/regions`` show it."""
    times = sorted(s for _, s in row.provision_s)
    last = max(row.provision_s, default=None)  # the newest provisioning, by when
    recent = sorted(row.failures, key=lambda f: f.at, reverse=True)[:RECENT]
    return {
        "name": cut(row.name, 100),
        "runs": row.runs,
        "attempts": row.attempts,
        "failures": len(row.failures),
        "refused": row.refused,
        "provisions": len(times),
        "provision_median": seconds(statistics.median(times)) if times else "-",
        "provision_max": seconds(times[-1]) if times else "-",
        "provision_last": "-" if last is None else seconds(last[1]),
        "price": row.price,
        "price_source": row.price_source,
        "recent": [
            {
                "when": clock(f.at),
                "ago": f"{age(now - f.at)} ago",
                "run_id": cut(f.run_id, 255),
                "href": run_href(f.run_id),
                "kind": cut(f.kind, 64),
                "detail": cut(f.detail, 200),
            }
            for f in recent
        ],
    }


class HomeRegions:
    """Every run's journal under home folded by region, each kept while it stays as it was."""

    def __init__(self, home: str) -> None:
        self.home = home
        self._kept: dict[str, tuple[Stamp, RunRegions | None]] = {}
        self._lock = threading.Lock()
        self._first = threading.Lock()  # as HomeRuns': the start's read, waited for

    def warm(self) -> None:
        """Fold every run once, as the console starts, before anyone asks."""
        with self._first:
            self._regions(time.time())

    def regions(self, now: float) -> list[dict[str, Any]]:
        """Every region across the runs, by name, as ``region_json`` gives it."""
        with self._first:
            pass
        return self._regions(now)

    def _regions(self, now: float) -> list[dict[str, Any]]:
        runs_dir = rundir.runs_path(self.home)
        try:
            names = [n for n in os.listdir(runs_dir) if not n.startswith(".")]
        except OSError:
            names = []
        with self._lock:
            kept = dict(self._kept)
        fresh: dict[str, tuple[Stamp, RunRegions | None]] = {}
        for name in names:
            journal = rundir.journal_path(os.path.join(runs_dir, name))
            st = stamp(journal)
            if st is None:
                continue
            if name in kept and kept[name][0] == st:
                fresh[name] = kept[name]
                continue
            try:
                fresh[name] = (st, fold_run(name, read_typed(journal)))
            except (DamagedFile, OSError):
                fresh[name] = (st, None)  # the runs page names it UNREADABLE, and why; not read again
        with self._lock:
            self._kept = fresh
        return [region_json(r, now) for r in region_rows(v for _, v in fresh.values() if v is not None)]
