"""Where a run goes, by the expected cost to finish (``recovery.placement=cost``). Pure:
the caller measures and prices each candidate (an ``Outlook``), this module scores them.
The same function places a run's first attempt and each failover.

A candidate that loses the run ``rate`` times an hour, and costs ``setup`` hours each time
it starts (provisioning, start-up, restore) plus half a checkpoint interval of work lost,
finishes ``work`` hours of training in expected

    hours = setup + work / (1 - rate * (setup + interval / 2))

(each hour of progress meets ``rate`` losses, each costing that much again; at or above
1 it never finishes). Its expected cost is ``hours`` times its price an hour, plus the
egress of fetching the newest checkpoint from the nearest store that holds it. A region
that shares its cloud and geography with the one just lost may be lost with it: it is
weighed with ``correlated_rate_per_h`` more losses an hour.

Ranked by expected cost, cheapest first; priced candidates before unpriced ones (which
rank by expected hours among themselves), and the listed order breaks ties."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Outlook:
    """What placement weighs of one candidate region."""

    region: str
    usd_per_hour: float | None  # the whole cluster (a node's price times its nodes); None: unpriced
    rate_per_h: float  # expected losses an hour (declared, or learned from the run)
    provision_s: float  # expected seconds to a cluster up
    startup_s: float  # cluster up to training
    restore_s: float  # loading the newest verified checkpoint here (a copy from afar included)
    egress_usd: float = 0.0  # fetching that checkpoint here from the nearest store holding it
    checkpoint_from: str | None = None  # that store's region (None: no checkpoint yet)
    correlated: bool = False  # shares cloud and geography with the region just lost


@dataclass(frozen=True)
class Score:
    region: str
    expected_hours: float  # inf: losses come faster than it can make progress
    expected_usd: float | None
    usd_per_hour: float | None
    rate_per_h: float  # as weighed (the correlated penalty included)
    setup_s: float
    egress_usd: float
    checkpoint_from: str | None
    correlated: bool

    def as_dict(self) -> dict[str, object]:
        finite = math.isfinite(self.expected_hours)
        return {
            "region": self.region,
            "usd_per_hour": _r(self.usd_per_hour, 4),
            "rate_per_h": round(self.rate_per_h, 4),
            "setup_s": round(self.setup_s, 1),
            "expected_hours": round(self.expected_hours, 4) if finite else None,
            "expected_usd": _r(self.expected_usd, 4) if finite else None,
            "egress_usd": round(self.egress_usd, 4),
            "checkpoint_from": self.checkpoint_from,
            "correlated": self.correlated,
        }


def _r(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def score(o: Outlook, work_h: float, interval_h: float, correlated_rate_per_h: float) -> Score:
    """``o``'s expected hours and dollars to finish ``work_h`` hours of training."""
    rate = max(0.0, o.rate_per_h) + (correlated_rate_per_h if o.correlated else 0.0)
    setup_s = max(0.0, o.provision_s) + max(0.0, o.startup_s) + max(0.0, o.restore_s)
    setup_h = setup_s / 3600
    burden = rate * (setup_h + max(0.0, interval_h) / 2)
    hours = setup_h + max(0.0, work_h) / (1 - burden) if burden < 1 else math.inf
    usd = None if o.usd_per_hour is None else hours * o.usd_per_hour + max(0.0, o.egress_usd)
    return Score(
        o.region, hours, usd, o.usd_per_hour, rate, setup_s, max(0.0, o.egress_usd), o.checkpoint_from, o.correlated
    )


def rank(
    outlooks: Sequence[Outlook], work_h: float, interval_h: float, correlated_rate_per_h: float = 0.0
) -> list[Score]:
    """Every candidate scored, the cheapest expected cost to finish first."""
    scored = [(i, score(o, work_h, interval_h, correlated_rate_per_h)) for i, o in enumerate(outlooks)]

    def key(item: tuple[int, Score]) -> tuple[bool, float, float, int]:
        i, s = item
        cost = s.expected_usd if s.expected_usd is not None else math.inf
        return (s.expected_usd is None, cost if math.isfinite(cost) else math.inf, s.expected_hours, i)

    return [s for _, s in sorted(scored, key=key)]


def learned_rate(declared_per_h: float, losses: int, hours: float, prior_h: float = 1.0) -> float:
    """A region's loss rate: the declared one, weighed as ``prior_h`` hours of evidence,
    updated with the losses this run met there over the hours it spent there."""
    declared = declared_per_h if math.isfinite(declared_per_h) and declared_per_h > 0 else 0.0
    hours = hours if math.isfinite(hours) and hours > 0 else 0.0
    return (declared * prior_h + max(0, losses)) / (prior_h + hours)


def geography(infra: str) -> tuple[str, str] | None:
    """``aws/us-east-1`` -> ("aws", "us"); ``gcp/europe-west4`` -> ("gcp", "europe");
    None where there is no cloud region to share fate through (local, on-prem)."""
    cloud, _, region = infra.partition("/")
    if cloud.lower() not in ("aws", "gcp", "azure") or not region:
        return None
    return cloud.lower(), region.split("-")[0].lower()
