"""What one node of a region costs an hour, in USD: ``cloud.regions.<r>.hourly_cost``
where it is set (on-prem and local regions, or to override), else the catalog snapshot
shipped with the SkyPilot provider (on-demand or spot, as the region launches), else
unpriced, with why. Read from the shipped CSV files alone: no SkyPilot import, no
network, so a run's cost is the same offline, in ``action=status`` and in replay."""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).parent / "skypilot" / "catalogs"
SCHEMA = "v8"
# The clouds whose catalog the snapshot holds: infra's first part -> its vms.csv.
_CATALOGS = {"aws": "aws/vms.csv", "gcp": "gcp/vms.csv"}


@dataclass(frozen=True)
class NodePrice:
    """One node's hourly price (None: unpriced) and where it came from, or why none."""

    usd_per_hour: float | None
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"usd_per_node_hour": self.usd_per_hour, "source": self.source}


@functools.cache
def snapshot_date(root: Path = SNAPSHOT) -> str:
    try:
        return (root / "SNAPSHOT").read_text(encoding="utf-8").strip()[:40]
    except OSError:
        return "?"


@functools.cache
def _rows(path: Path) -> tuple[dict[str, str], ...]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            return tuple(csv.DictReader(f))
    except OSError:
        return ()


def _number(value: Any) -> float | None:
    try:
        n = float(value)
    except (TypeError, ValueError):
        return None
    return n if math.isfinite(n) and n >= 0 else None


def _accelerator(spec: str) -> tuple[str, float] | None:
    """``"A10G:1"`` -> ("A10G", 1.0); ``"A10G"`` -> ("A10G", 1.0)."""
    name, _, count = spec.partition(":")
    n = _number(count or "1")
    return (name.strip(), n) if name.strip() and n else None


def catalog_price(infra: str, instance_type: str, accelerators: str, spot: bool, root: Path = SNAPSHOT) -> NodePrice:
    """The cheapest zone's price of the instance type (or of the cheapest instance with the
    accelerators) in ``infra``'s region, from the snapshot: as SkyPilot's optimizer picks."""
    cloud, _, region = infra.partition("/")
    table = _CATALOGS.get(cloud.lower())
    kind = "spot" if spot else "on-demand"
    if table is None or not region:
        return NodePrice(None, f"no catalog for infra {infra!r}: set hourly_cost")
    wanted = _accelerator(accelerators) if accelerators and not instance_type else None
    if not instance_type and wanted is None:
        return NodePrice(None, "no instance_type or accelerators to price: set hourly_cost")
    column = "SpotPrice" if spot else "Price"
    best: tuple[float, str] | None = None
    for row in _rows(root / SCHEMA / table):
        if row.get("Region") != region:
            continue
        if instance_type and row.get("InstanceType") != instance_type:
            continue
        if wanted is not None and (
            row.get("AcceleratorName") != wanted[0] or _number(row.get("AcceleratorCount")) != wanted[1]
        ):
            continue
        price = _number(row.get(column))
        if price is not None and (best is None or price < best[0]):
            best = (price, row.get("InstanceType", "?"))
    what = instance_type or accelerators
    if best is None:
        return NodePrice(None, f"{what} in {region} is not in the catalog snapshot ({kind}): set hourly_cost")
    return NodePrice(best[0], f"catalog snapshot {snapshot_date(root)}: {best[1]} in {region}, {kind}")


def node_price(name: str, region: Mapping[str, Any], root: Path = SNAPSHOT) -> NodePrice:
    """The price of one node of region ``name`` as its config (a dict) describes it."""
    own = region.get("hourly_cost")
    if own is not None:
        price = _number(own)
        if price is not None:
            return NodePrice(price, f"cloud.regions.{name}.hourly_cost")
        return NodePrice(None, f"cloud.regions.{name}.hourly_cost is not a price")
    infra = str(region.get("infra") or "")
    if not infra:
        return NodePrice(None, f"no price: set cloud.regions.{name}.hourly_cost (USD per node-hour)")
    return catalog_price(
        infra,
        str(region.get("instance_type") or ""),
        str(region.get("accelerators") or ""),
        bool(region.get("use_spot")),
        root,
    )


def _regions(config: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """cloud.regions of a run's config as the journal keeps it (a dict, for display: a
    damaged section reads as no regions)."""
    cloud = config.get("cloud") if isinstance(config, Mapping) else None
    regions = cloud.get("regions") if isinstance(cloud, Mapping) else None
    if not isinstance(regions, Mapping):
        return {}
    return {str(n): r for n, r in regions.items() if isinstance(r, Mapping)}


def region_prices(config: Mapping[str, Any], root: Path = SNAPSHOT) -> dict[str, NodePrice]:
    """Every region of a run's config (the journal's copy: a dict), priced."""
    return {name: node_price(name, r, root) for name, r in _regions(config).items()}


def region_nodes(config: Mapping[str, Any]) -> dict[str, int]:
    """Each region's node count (nodes, or SkyPilot's num_nodes), from a run's config dict."""
    out: dict[str, int] = {}
    for name, r in _regions(config).items():
        nodes, num_nodes = r.get("nodes", 1), r.get("num_nodes", 1)
        n = nodes if nodes != 1 else num_nodes
        out[str(name)] = n if isinstance(n, int) and not isinstance(n, bool) and 0 < n < 100_000 else 1
    return out


# USD per GB leaving a cloud region, by where it goes (list prices, 2026-12): between two
# regions of the same cloud, and out to another cloud. Local and on-prem stores: free.
EGRESS_DATE = "2026-12"
EGRESS_USD_PER_GB = {
    ("aws", "same"): 0.02,
    ("aws", "other"): 0.09,
    ("gcp", "same"): 0.02,
    ("gcp", "other"): 0.12,
}


def egress_usd_per_gb(from_infra: str, to_infra: str) -> float:
    """What a GB copied from ``from_infra``'s region to ``to_infra``'s costs."""
    src, _, src_region = from_infra.partition("/")
    dst, _, dst_region = to_infra.partition("/")
    src, dst = src.lower(), dst.lower()
    if not src_region or (src == dst and src_region == dst_region):
        return 0.0
    return EGRESS_USD_PER_GB.get((src, "same" if src == dst else "other"), 0.0)
