"""The placement groups of multi-worker trials: noted from their results, removed once their
trial stops running (and never one a trial did not report)."""

from __future__ import annotations

import pytest

from orchestrator.runtime.search import groups
from orchestrator.runtime.search.groups import PLACEMENT_GROUP, TrialGroups

pytestmark = pytest.mark.unit
PG_A, PG_B = "a1" * 18, "b2" * 18


def test_a_stopped_trials_group_is_removed_and_a_running_ones_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    removed: list[str] = []
    monkeypatch.setattr(groups, "remove", removed.append)
    g = TrialGroups()
    g.note("trial_00000", {PLACEMENT_GROUP: PG_A})
    g.note("trial_00001", {PLACEMENT_GROUP: PG_B})
    g.note("trial_00002", {PLACEMENT_GROUP: "../../etc"})  # not an id: never acted on
    g.note("trial_00003", {"accuracy": 0.5})
    assert g.sweep({"trial_00000", "trial_00001"}) == [] and removed == []
    assert g.sweep({"trial_00001"}) == ["trial_00000"] and removed == [PG_A]
    assert g.sweep(set()) == ["trial_00001"] and removed == [PG_A, PG_B]
    assert g.sweep(set()) == []
