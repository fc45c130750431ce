"""``Result``: a run's result.json as a typed record (its reference: the result.json page)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Result:
    """How a run ended, or that it stopped and waits to be resumed (INTERRUPTED). The
    fields every reader needs are typed here; ``raw`` is the whole file, for the rest
    (``attempt_history``, ``telemetry``, a search's ``trials`` and ``best_trial``...)."""

    run_id: str
    # SUCCEEDED, FAILED, CANCELLED, or INTERRUPTED (stopped: Run.resume goes on).
    status: str
    reason: str
    final_step: int | None
    final_checkpoint: str | None
    metrics: dict[str, Any]
    # The final weights' digest: two runs that end with the same one trained the same.
    weights_sha256: str | None
    checkpoint_sha256: str | None
    attempts: int
    incidents: list[dict[str, Any]]
    duration_s: float
    region: str | None = None
    # A run the workload's own code failed: {"error", "step", "site"}.
    user_error: dict[str, Any] | None = None
    # chaos.objectives, judged: {"met", "checked": [...]}.
    objectives: dict[str, Any] | None = None
    # Where the wall time went and what it cost.
    goodput: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def succeeded(self) -> bool:
        """SUCCEEDED, with every objective it was given met."""
        met = self.objectives.get("met", True) if isinstance(self.objectives, dict) else True
        return self.status == "SUCCEEDED" and bool(met)

    @property
    def resumable(self) -> bool:
        """Stopped, not ended: ``Run.resume`` goes on from its newest checkpoint."""
        return self.status == "INTERRUPTED"

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], run_id: str = "") -> Result:
        """A result.json as ``runstate.result.read_result`` read (and checked) it;
        ``run_id`` where the file does not say (one written before it did)."""

        def opt(key: str, kind: type | tuple[type, ...]) -> Any:
            value = obj.get(key)
            return value if isinstance(value, kind) else None

        return cls(
            run_id=str(obj.get("run_id") or run_id),
            status=str(obj["status"]),
            reason=opt("reason", str) or "",
            final_step=opt("final_step", int),
            final_checkpoint=opt("final_checkpoint", str),
            metrics=dict(obj.get("metrics") or {}),
            weights_sha256=opt("weights_sha256", str),
            checkpoint_sha256=opt("checkpoint_sha256", str),
            attempts=int(obj.get("attempts") or 0),
            incidents=list(obj.get("incidents") or []),
            duration_s=float(obj.get("duration_s") or 0.0),
            region=opt("region", str),
            user_error=opt("user_error", dict),
            objectives=opt("objectives", dict),
            goodput=opt("goodput", dict),
            raw=dict(obj),
        )
