"""A snapshot's trial checkpoints are checked before a search believes them."""

from __future__ import annotations

import io

import pytest
import torch

from orchestrator.hpo import TrialRecord
from orchestrator.runtime.search.restore import check_trial_checkpoints
from orchestrator.runtime.search.snapshot import SearchSnapshot, SnapshotError

pytestmark = pytest.mark.unit


def state(iteration: int) -> bytes:
    buf = io.BytesIO()
    torch.save({"iteration": iteration, "trial_id": "trial_00000", "data_position": iteration}, buf)
    return buf.getvalue()


def snapshot(parts: dict[str, bytes], recorded: int) -> SearchSnapshot:
    return SearchSnapshot(
        [TrialRecord("trial_00000", "PAUSED", recorded, {}, {}, recorded)], None, {"trial_00000": parts}
    )


def test_a_checkpoint_at_its_recorded_iteration_passes() -> None:
    check_trial_checkpoints(snapshot({"state.pt": state(3)}, 3))
    check_trial_checkpoints(SearchSnapshot([]))


def test_a_checkpoint_at_another_iteration_is_refused_in_one_line() -> None:
    with pytest.raises(SnapshotError, match="trial_00000's checkpoint is at iteration 2, its record says 3"):
        check_trial_checkpoints(snapshot({"state.pt": state(2)}, 3))


def test_a_state_that_does_not_load_is_refused() -> None:
    with pytest.raises(SnapshotError, match="trial_00000's checkpoint state does not load"):
        check_trial_checkpoints(snapshot({"state.pt": b"not a torch file"}, 3))
