"""A run's goodput block (result.json's ``goodput``, or the same fold of a live run's
journal) as ``action=status``, ``action=list`` and ``action=report`` show it. The block
may come from a result.json someone edited: anything that is not a number is shown as
unknown, never trusted into arithmetic that could raise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.runstate.goodput import CATEGORIES, amount

# How each category reads in a sentence.
LABELS = {
    "productive": "productive",
    "retrained": "re-trained",
    "checkpoint_stall": "checkpoint stalls",
    "restore": "restore",
    "startup": "start-up",
    "provisioning": "provisioning",
    "waiting_for_capacity": "waiting for capacity",
    "failure_detection": "failure detection",
    "orchestration": "controller",
}


def seconds_by_category(g: Mapping[str, Any]) -> dict[str, float]:
    raw = g.get("seconds")
    raw = raw if isinstance(raw, Mapping) else {}
    return {c: v for c in CATEGORIES if (v := amount(raw.get(c))) is not None}


def cost_total(g: Mapping[str, Any]) -> float | None:
    cost = g.get("cost_usd")
    return amount(cost.get("total")) if isinstance(cost, Mapping) else None


def unpriced(g: Mapping[str, Any]) -> list[str]:
    names = g.get("unpriced")
    return [str(n)[:64] for n in names[:20]] if isinstance(names, list) else []


def dollars(x: float) -> str:
    return f"${x:.2f}" if x >= 1 else f"${x:.4f}"


def goodput_cell(g: Mapping[str, Any] | None) -> str:
    """``action=list``'s goodput column: ``48%`` or ``-``."""
    share = amount(g.get("goodput")) if isinstance(g, Mapping) else None
    return "-" if share is None else f"{100 * share:.0f}%"


def cost_cell(g: Mapping[str, Any] | None) -> str:
    """``action=list``'s cost column: ``$0.0123``, ``?`` (a region unpriced) or ``-``."""
    if not isinstance(g, Mapping):
        return "-"
    total = cost_total(g)
    return dollars(total) if total is not None else ("?" if unpriced(g) else "-")


def goodput_lines(g: Mapping[str, Any] | None) -> list[str]:
    """``action=status``'s goodput and cost lines."""
    if not isinstance(g, Mapping):
        return []
    secs = seconds_by_category(g)
    wall = amount(g.get("wall_s"))
    share = amount(g.get("goodput"))
    parts = [f"{LABELS[c]} {v:.1f}s" for c, v in sorted(secs.items(), key=lambda kv: -kv[1]) if v >= 0.05]
    head = f"{100 * share:.1f}% of {wall:.1f}s" if share is not None and wall is not None else "-"
    retrained = g.get("retrained_steps")
    again = f" ({retrained} steps trained twice)" if isinstance(retrained, int) and retrained > 0 else ""
    lines = [f"goodput    {head}: {', '.join(parts) or '-'}{again}"]
    hours = g.get("node_hours") if isinstance(g.get("node_hours"), Mapping) else {}
    node_h = sum(v for v in map(amount, hours.values()) if v is not None)
    idle = g.get("standby_idle_node_hours") if isinstance(g.get("standby_idle_node_hours"), Mapping) else {}
    idle_h = sum(v for v in map(amount, idle.values()) if v is not None)
    hours_text = f"{node_h:.3f} node-h" + (f" + {idle_h:.3f} standby idle" if idle_h else "")
    total = cost_total(g)
    missing = unpriced(g)
    if total is not None:
        by = g["cost_usd"].get("by_region") if isinstance(g["cost_usd"].get("by_region"), Mapping) else {}
        regions = ", ".join(f"{str(r)[:64]} {dollars(c)}" for r, v in by.items() if (c := amount(v)) is not None)
        lines.append(f"cost       {dollars(total)} over {hours_text}" + (f" ({regions})" if regions else ""))
    elif missing:
        lines.append(
            f"cost       unknown over {hours_text}: no price for {', '.join(missing)} "
            "(set cloud.regions.<region>.hourly_cost, USD per node-hour)"
        )
    return lines
