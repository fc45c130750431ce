"""Incidents: one per failure the run survived (or died of), with its RTO and RPO."""

from __future__ import annotations

from dataclasses import asdict, dataclass

NODE_FIELDS = ("node", "world_size_before", "world_size_after", "replace_s")


@dataclass
class Incident:
    kind: str
    from_region: str
    to_region: str | None
    failed_at: float  # best estimate of when it broke (fault time, else last sign of life)
    detected_at: float
    last_step: int  # the last step known done before the failure
    restored_step: int | None = None
    first_step_at: float | None = None
    generation: int = 0
    # node_lost only (orchestrator/control/nodewatch.py).
    node: int | None = None
    world_size_before: int | None = None
    world_size_after: int | None = None
    replace_s: float | None = None

    @property
    def detected_after_s(self) -> float:
        return max(0.0, self.detected_at - self.failed_at)

    @property
    def lost_steps(self) -> int | None:
        return None if self.restored_step is None else max(0, self.last_step - self.restored_step)

    @property
    def rto_s(self) -> float | None:
        return None if self.first_step_at is None else max(0.0, self.first_step_at - self.failed_at)

    def record(self) -> dict[str, object]:
        d = asdict(self)
        for key in NODE_FIELDS:  # node_lost's own: absent elsewhere, as before they existed
            if d[key] is None:
                del d[key]
        d.update(
            detected_after_s=round(self.detected_after_s, 3),
            lost_steps=self.lost_steps,
            rto_s=None if self.rto_s is None else round(self.rto_s, 3),
        )
        return d


def first_step_time(progress: dict[str, object], restored_step: int, failed_at: float, reported_at: float) -> float:
    """When the first step after an incident's restore was done: the runtime's word
    (``resumed_at``) where the report speaks of that restore and the time lies between the
    failure and the report; else the report's own time (up to a report interval late)."""
    at = progress.get("resumed_at")
    if progress.get("restored_step") != restored_step or isinstance(at, bool) or not isinstance(at, int | float):
        return reported_at
    return float(at) if failed_at <= at <= reported_at else reported_at
