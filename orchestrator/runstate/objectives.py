"""``chaos.objectives``: a chaos run or a drilled run as a pass/fail gate.

Judged once, as result.json is written, from the run's own result (and, for ``exact``,
a finished baseline run's under the same home): each objective's limit, what the run
measured and whether it was met, in result.json's ``objectives``. A run that SUCCEEDED
and missed one exits with its own status (``EXIT_OBJECTIVE_MISSED``) and a line naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Exit status of a run that ended SUCCEEDED and missed an objective.
EXIT_OBJECTIVE_MISSED = 4


def _worst(incidents: list[Any], key: str) -> float | None:
    values = [i.get(key) for i in incidents if isinstance(i, dict) and isinstance(i.get(key), int | float)]
    return max(values) if values else None


def judge(
    max_rto_s: float | None,
    max_lost_steps: int | None,
    exact: str | None,
    result: Mapping[str, Any],
    baseline: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """Each objective set, checked against ``result``: ``{"met": bool, "checked": [...]}``;
    None when none is set. ``baseline``: the result of the run ``exact`` names (None: not
    found or not finished)."""
    checked: list[dict[str, Any]] = []
    incidents = list(result.get("incidents") or [])
    if max_rto_s is not None:
        worst = _worst(incidents, "rto_s")
        checked.append(_check("max_rto_s", max_rto_s, worst, worst is None or worst <= max_rto_s))
    if max_lost_steps is not None:
        worst = _worst(incidents, "lost_steps")
        checked.append(_check("max_lost_steps", max_lost_steps, worst, worst is None or worst <= max_lost_steps))
    if exact is not None:
        mine = result.get("weights_sha256") or result.get("checkpoint_sha256")
        theirs = None if baseline is None else baseline.get("weights_sha256") or baseline.get("checkpoint_sha256")
        met = result.get("status") == "SUCCEEDED" and mine is not None and mine == theirs
        entry = _check("exact", exact, mine, met)
        if baseline is None:
            entry["why"] = f"no finished run named {exact!r} to compare with"
        elif theirs is None:
            entry["why"] = f"run {exact!r} has no final weights to compare with"
        checked.append(entry)
    if not checked:
        return None
    return {"met": all(c["met"] for c in checked), "checked": checked}


def _check(name: str, limit: Any, measured: Any, met: bool) -> dict[str, Any]:
    return {"objective": name, "limit": limit, "measured": measured, "met": bool(met)}


def missed_line(objectives: Mapping[str, Any]) -> str:
    """One line naming every objective missed, with its limit and what was measured."""
    parts = []
    for c in objectives.get("checked") or []:
        if c.get("met"):
            continue
        if c.get("objective") == "exact":
            why = c.get("why") or f"the weights differ from run {c.get('limit')!r}'s"
            parts.append(f"exact ({why})")
        else:
            parts.append(f"{c.get('objective')} {c.get('limit')} (measured {c.get('measured')})")
    return "objective missed: " + "; ".join(parts)
