"""A snapshot's trial checkpoints are checked before a search believes them."""

from __future__ import annotations

import io

import pytest
import torch

from orchestrator.hpo import TrialRecord, trial_key
from orchestrator.hpo.replay import OptunaReplay
from orchestrator.runtime.search.restore import check_trial_checkpoints, proposer_from
from orchestrator.runtime.search.snapshot import SearchSnapshot, SnapshotError
from orchestrator.wire.sections import HpoSection

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


# --- a searcher that proposes trials, rebuilt --------------------------------------------------------

SPACE = {"job.lr": "loguniform 0.001 0.3", "job.params.hidden": "choice 8 16 32"}


def hpo() -> HpoSection:
    return HpoSection(enabled=True, search_alg="optuna", num_samples=4, search_space=SPACE)


def proposed(n: int) -> SearchSnapshot:
    proposer = OptunaReplay(SPACE, 5, "max", 4)
    trials = []
    for _ in range(n):
        index, values = proposer.ask()
        trials.append(TrialRecord(trial_key(index), "RUNNING", config=values))
    return SearchSnapshot(trials, None, {}, proposer.events)


def test_a_proposing_searcher_is_rebuilt_with_its_trials_values_in_order() -> None:
    snap = proposed(3)
    proposer, configs = proposer_from(hpo(), 5, snap)
    assert configs == [t.config for t in snap.trials] and proposer.asked == 3
    fresh, none = proposer_from(hpo(), 5, None)
    assert (fresh.asked, none) == (0, [])


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda s: s.trials.pop(1), "proposed trial_00001, and the snapshot has no record of it"),
        (lambda s: s.searcher.pop(), "records a trial its searcher never proposed"),
        (lambda s: s.trials[0].config.update({"job.lr": 0.2}), "proposes other values for trial 0"),
    ],
)
def test_a_snapshot_its_searcher_could_not_have_left_is_refused(change, words: str) -> None:
    snap = proposed(3)
    change(snap)
    with pytest.raises(SnapshotError, match=words):
        proposer_from(hpo(), 5, snap)
