"""What a search reads of the runtime spec: its hpo section, and ASHA's rungs from it."""

from __future__ import annotations

from orchestrator.hpo import asha_rungs
from orchestrator.wire.sections import HpoSection
from orchestrator.wire.spec import RuntimeSpec


def search_of(spec: RuntimeSpec) -> HpoSection:
    """The spec's hpo section: a search has one (the driver starts a search only then)."""
    if spec.hpo is None:
        raise ValueError("runtime spec: hpo: missing; a search needs it")
    return spec.hpo


def rung_list(hpo: HpoSection) -> list[int] | None:
    """ASHA's rungs (iterations); None for a FIFO search."""
    if hpo.scheduler != "asha":
        return None
    return asha_rungs(hpo.max_t, hpo.grace_period, hpo.reduction_factor)
