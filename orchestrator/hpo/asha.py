"""ASHA's rule as plain data: the rungs, the quantile, the recorded values of each trial."""

from __future__ import annotations

import math


class AshaRungs:
    """ASHA's bookkeeping as plain data (one bracket, Tune's rule), so that it travels in a
    search snapshot as JSON and is rebuilt, never unpickled, on restore.

    At each rung (an iteration below max_t, see asha_rungs) a trial's first result is
    recorded; it is stopped if it is worse than the ``1 - 1/reduction_factor`` quantile
    of the results recorded there before it. Trials are named by trial_key, so a
    restored search's trials meet the values their earlier selves left at each rung.
    """

    def __init__(self, rungs: list[int], reduction_factor: int, mode: str) -> None:
        self.reduction_factor, self.sign = reduction_factor, 1.0 if mode == "max" else -1.0
        self.recorded: dict[int, dict[str, float]] = {r: {} for r in rungs}

    def on_result(self, trial_id: str, iteration: int, value: float) -> bool:
        """Record the result at the highest rung it reached; True: stop the trial."""
        for rung in sorted(self.recorded, reverse=True):
            seen = self.recorded[rung]
            if iteration < rung or trial_id in seen:
                continue
            cutoff = quantile(list(seen.values()), 1 - 1 / self.reduction_factor)
            seen[trial_id] = self.sign * value
            return cutoff is not None and self.sign * value < cutoff
        return False

    def to_json(self) -> dict[str, dict[str, float]]:
        return {str(r): dict(sorted(v.items())) for r, v in sorted(self.recorded.items())}

    def load(self, data: dict[str, dict[str, float]]) -> None:
        """Values a snapshot recorded (already checked: rungs and trials known, numbers finite)."""
        for rung, values in data.items():
            self.recorded[int(rung)] = dict(values)


def quantile(values: list[float], q: float) -> float | None:
    """numpy's nanpercentile (linear), as Tune's ASHA takes it; None for no values."""
    xs = sorted(v for v in values if not math.isnan(v))
    if not xs:
        return None
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def asha_rungs(max_t: int, grace_period: int, reduction_factor: int) -> list[int]:
    """Iterations at which ASHA may stop a trial (below max_t), ascending."""
    rungs, t = [], grace_period
    while t < max_t:
        rungs.append(t)
        t *= reduction_factor
    return rungs
