"""action=drill's fault, as the controller reads it from the request file: a fault of
DRILL_FAULTS for the region the run trains in, with no trigger of its own (it strikes
now). The command checked it against the run's config before writing it; this is the
controller's own check of what it reads from a file."""

from __future__ import annotations

from typing import Any

from orchestrator.wire.faults import DRILL_FAULTS
from orchestrator.wire.sections import FaultSpec

TRIGGERS = ("at_step", "after_s", "during", "random")


def drill_fault(plain: dict[str, Any], region: str) -> tuple[str | None, FaultSpec | None]:
    """(None, the fault) to inject, or (why not, None)."""
    try:
        fault = FaultSpec.from_plain(plain, "fault")
    except ValueError as exc:
        return str(exc).split("\n")[0][:300], None
    if fault.kind not in DRILL_FAULTS:
        return f"{fault.kind} is not a fault a drill injects (those are: {', '.join(DRILL_FAULTS)})", None
    if any(getattr(fault, t) is not None for t in TRIGGERS):
        return "a drill's fault strikes now: it takes no trigger", None
    if fault.region is not None and fault.region != region:
        return f"for region {fault.region!r}, and the run trains in {region!r}", None
    return None, fault
