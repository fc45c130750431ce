"""The placement groups of multi-worker trials, removed once their trial stops running.

A multi-worker trial's Ray Train run holds its workers' CPUs in a placement group, which
its controller removes when the run ends by itself. A trial that Tune stops (ASHA's
pruning, a trial at max_t, PBT's pause before an exploit, an error) loses its Tune actor,
and the controller with it, mid-run: Ray Train's own clean-up of such a group asks the
State API, which a cluster without its dashboard lacks, so the group would hold the
CPUs the next trial waits for. Each trial's rank 0 reports its group's id with its
metrics (``PLACEMENT_GROUP``); the search driver removes it once the trial is not
running (``TrialGroups``).
"""

from __future__ import annotations

import re
from typing import Any

PLACEMENT_GROUP = "placement_group"
_ID = re.compile(r"[0-9a-f]{16,64}")


def own_group() -> str | None:
    """The placement group this Ray worker runs in, by id (hex), if any."""
    from ray.util import get_current_placement_group

    pg = get_current_placement_group()
    return None if pg is None else pg.id.hex()


class TrialGroups:
    def __init__(self) -> None:
        self.groups: dict[str, str] = {}  # trial id -> its running placement group

    def note(self, trial_id: str, result: dict[str, Any]) -> None:
        pg = result.get(PLACEMENT_GROUP)
        if isinstance(pg, str) and _ID.fullmatch(pg):
            self.groups[trial_id] = pg

    def sweep(self, running: set[str]) -> list[str]:
        """Remove the group of each trial not in ``running``; the ids removed."""
        gone = [t for t in self.groups if t not in running]
        for trial_id in gone:
            remove(self.groups.pop(trial_id))
        return gone


def remove(pg_hex: str) -> None:
    """Remove a placement group by id (its actors with it); one already gone is no error."""
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    try:
        remove_placement_group(PlacementGroup(PlacementGroupID.from_hex(pg_hex)))
    except Exception:  # removed already, by its controller or a sweep before
        pass
