"""A snapshot's trial checkpoints are checked before a search believes them."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from orchestrator.hpo import TrialRecord, trial_key
from orchestrator.hpo.replay import OptunaReplay
from orchestrator.runtime.search.restore import check_trial_checkpoints, newest_whole, proposer_from, read_trials
from orchestrator.runtime.search.snapshot import SearchSnapshot, SnapshotError
from orchestrator.runtime.search.trial import load_tensors
from orchestrator.wire.sections import HpoSection
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY

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


# --- the trials' checkpoints a snapshot names, read from the store ----------------------------


def test_the_checkpoints_a_snapshot_names_are_read_into_it_and_one_no_store_holds_whole_is_why_not(
    tmp_path: Path,
) -> None:
    from orchestrator.runtime.search.trial_store import TrialStore, trial_run

    ss = [CheckpointStore(f"file://{tmp_path}/{r}", region=r, key=TEST_KEY) for r in ("local-a", "local-b")]
    parts = {"model.pt": b"m", "optimizer.pt": b"o", "state.pt": state(3)}
    ref = TrialStore(ss, "test-run", 2, 0.5, lambda t, f: None).commit("trial_00000", 3, parts)
    snap = replace(snapshot({}, 3), checkpoints={}, refs={"trial_00000": ref})
    assert read_trials(snap, "test-run", ss, functions=False) is None
    assert snap.checkpoints == {"trial_00000": parts} and snap.read_from == {"trial_00000": "local-a"}
    check_trial_checkpoints(snap)
    # Gone from the primary, its copy in the other region serves; gone from both: why not.
    ss[0].delete_folder(trial_run("test-run", "trial_00000"), 3, 2)
    again = replace(snap, checkpoints={}, read_from={})
    assert read_trials(again, "test-run", ss, functions=False) is None and again.read_from == {"trial_00000": "local-b"}
    ss[1].delete_folder(trial_run("test-run", "trial_00000"), 3, 2)
    why = read_trials(replace(snap, checkpoints={}), "test-run", ss, functions=False)
    assert why is not None and why.startswith("its checkpoint of trial_00000 at iteration 3 is in no store whole")
    # A workload search never takes a train function's folder (nor the other way round).
    ref = TrialStore(ss, "test-run", 2, 0.5, lambda t, f: None).commit("trial_00000", 3, parts)
    with pytest.raises(SnapshotError, match="is not a train function's folder"):
        read_trials(replace(snap, checkpoints={}, refs={"trial_00000": ref}), "test-run", ss, functions=True)


def test_a_snapshot_whose_named_checkpoint_is_in_no_store_whole_is_passed_over_for_the_older_one(
    tmp_path: Path,
) -> None:
    from orchestrator.hpo import sample_configs
    from orchestrator.runtime.search.snapshot import ARCHIVE, pack
    from orchestrator.runtime.search.trial_store import TrialStore, trial_run

    ss = [CheckpointStore(f"file://{tmp_path}/{r}", region=r, key=TEST_KEY) for r in ("local-a", "local-b")]
    configs = sample_configs({"lr": "loguniform 0.01 0.2"}, 1, seed=0)
    trials = TrialStore(ss, "test-run", 2, 0.5, lambda t, f: None)
    for step, it in ((4, 2), (6, 3)):
        parts = {"model.pt": b"m", "optimizer.pt": b"o", "state.pt": state(it)}
        ref = trials.commit("trial_00000", it, parts)
        record = TrialRecord("trial_00000", "PAUSED", it, dict(configs[0]), {}, it)
        data = pack(SearchSnapshot([record], None, {}, refs={"trial_00000": ref}))
        for store in ss:
            store.commit("test-run", step, 2, [store.put("test-run", step, ARCHIVE, data, 2)])
    skips: list[tuple[str, int, str]] = []

    def newest() -> tuple[CheckpointStore, int, SearchSnapshot] | None:
        return newest_whole(
            "test-run",
            ss,
            lambda s, step, why: skips.append((s.region, step, why)),
            lambda s, e: None,
            None,
            configs,
            6,
            None,
        )

    found = newest()
    assert found is not None and found[:2] == (ss[0], 6) and skips == []
    assert load_tensors(found[2].checkpoints["trial_00000"]["state.pt"])["iteration"] == 3
    # Iteration 3's checkpoint gone from every store: step 6 is passed over in each, with why.
    for store in ss:
        store.delete_folder(trial_run("test-run", "trial_00000"), 3, 2)
    found = newest()
    assert found is not None and found[:2] == (ss[0], 4)
    assert [(r, s) for r, s, _ in skips] == [("local-a", 6), ("local-b", 6)]
    assert all("its checkpoint of trial_00000 at iteration 3 is in no store whole" in why for *_, why in skips)
