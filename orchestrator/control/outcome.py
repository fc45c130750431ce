"""What one attempt came to: the record the attempt runner fills in (with what its watch
folded) and the controller decides on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.runstate.incidents import Incident
from recovery.detection import Failure


@dataclass
class AttemptOutcome:
    generation: int
    region: str
    started_at: float
    succeeded: bool = False
    failure: Failure | None = None
    final: dict[str, Any] | None = None
    detected_at: float = 0.0
    failed_at: float | None = None
    last_step: int = 0
    restored_step: int | None = None
    incidents: list[Incident] = field(default_factory=list)
    ended_at: float = 0.0
    # The incident the attempt recovers from (None: nothing failed), as far as it got:
    # recorded among ``incidents`` once the attempt trained past its restore.
    pending: Incident | None = None

    @property
    def pending_recorded(self) -> bool:
        return self.pending is not None and self.pending in self.incidents

    def summary(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "region": self.region,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "restored_step": self.restored_step,
            "last_step": self.last_step,
            "outcome": "succeeded" if self.succeeded else str(self.failure.kind if self.failure else "interrupted"),
        }
