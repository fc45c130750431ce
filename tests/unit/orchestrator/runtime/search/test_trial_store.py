"""Trials' checkpoints as signed checkpoints of their own: committed, fenced by the run's
fence, copied to the other regions, read back only as the snapshot names them, pruned
as the snapshots move on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.runtime.search.trial_store import (
    KIND,
    TrialRef,
    TrialRefError,
    TrialStore,
    doomed_folders,
    fetch_trial,
    files_digest,
    low_water,
    trial_run,
)
from recovery.fencing import FencedError, Lineage
from recovery.store import CheckpointStore, fence_owner
from tests.support.stores import TEST_KEY

pytestmark = pytest.mark.unit
RUN = "test-run"  # TEST_KEY's run: the one its fences are signed for
T = "trial_00003"
FILES = {"model.pt": b"m" * 300, "optimizer.pt": b"o" * 600, "state.pt": b"s" * 10}


def stores(tmp_path: Path) -> list[CheckpointStore]:
    return [CheckpointStore(f"file://{tmp_path}/{r}", region=r, key=TEST_KEY) for r in ("local-a", "local-b")]


def trial_store(ss: list[CheckpointStore], generation: int = 2) -> tuple[TrialStore, list[tuple[str, dict]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    return TrialStore(ss, RUN, generation, 0.5, lambda t, f: events.append((t, f))), events


def test_a_reference_reads_back_and_anything_else_is_refused() -> None:
    ref = TrialRef(4, 2, "ab" * 32)
    assert TrialRef.from_json(ref.to_json(), 8) == ref
    for raw, words in [
        ([4, 2], "is not an object"),
        ({**ref.to_json(), "path": "../x"}, "is not an object"),
        ({**ref.to_json(), "iteration": True}, "iteration"),
        ({**ref.to_json(), "iteration": 9}, "iteration"),
        ({**ref.to_json(), "iteration": 0}, "iteration"),
        ({**ref.to_json(), "attempt": -1}, "attempt"),
        ({**ref.to_json(), "digest": "AB" * 32}, "digest"),
        ({**ref.to_json(), "digest": "ab" * 31}, "digest"),
    ]:
        with pytest.raises(TrialRefError, match=words):
            TrialRef.from_json(raw, 8)


def test_a_trials_checkpoints_live_under_its_run_and_its_runs_fence_fences_them() -> None:
    assert trial_run(RUN, T) == f"{RUN}/trials/{T}"
    assert fence_owner(trial_run(RUN, T)) == fence_owner(RUN) == RUN


def test_a_commit_is_signed_in_the_primary_copied_to_the_others_and_read_back_as_named(tmp_path: Path) -> None:
    ss = stores(tmp_path)
    ts, events = trial_store(ss)
    ref = ts.commit(T, 3, FILES)
    assert ref == TrialRef(3, 2, files_digest(FILES))
    for store in ss:
        m = store.manifest(trial_run(RUN, T), 3)
        assert m is not None and store.trusts(m).ok and m.attempt == 2
        assert m.extra == {
            "kind": KIND,
            "trial_id": T,
            "iteration": 3,
            **({"replica_of": "local-a"} if store is ss[1] else {}),
        }
        assert fetch_trial([store], RUN, T, ref) == (FILES, "")
    assert [e for e, _ in events] == ["trial_checkpointed", "replicated"]
    assert events[0][1]["trial_id"] == T and events[0][1]["iteration"] == 3 and events[0][1]["bytes"] == 910
    # The same files again: nothing committed twice.
    assert ts.commit(T, 3, FILES) == ref and len(events) == 2


def test_a_checkpoint_that_is_not_the_one_named_is_never_read_back(tmp_path: Path) -> None:
    ss = stores(tmp_path)
    ts, _ = trial_store(ss)
    ref = ts.commit(T, 3, FILES)
    # Another generation's checkpoint of the same trial and iteration (a zombie's): not this one.
    zombie, _ = trial_store(ss, generation=1)
    other = zombie.commit(T, 3, {**FILES, "model.pt": b"z" * 300})
    assert fetch_trial(ss, RUN, T, other)[0] is not None  # it is there, signed...
    assert fetch_trial(ss, RUN, T, ref) == (FILES, "")  # ...and never taken for the named one
    files, why = fetch_trial(ss, RUN, T, TrialRef(3, 2, "00" * 32))
    assert files is None and "not the one the snapshot names" in why
    # A flipped byte in the primary: the replica's copy is read instead; in both: none.
    path = f"{ss[0].write_path(trial_run(RUN, T), 3, 2)}/model.pt"
    ss[0].fs.pipe_file(path, b"x" * 300)
    assert fetch_trial(ss, RUN, T, ref) == (FILES, "")
    ss[1].fs.pipe_file(f"{ss[1].write_path(trial_run(RUN, T), 3, 2)}/model.pt", b"x" * 300)
    files, why = fetch_trial(ss, RUN, T, ref)
    assert files is None and "local-a" in why and "local-b" in why
    assert fetch_trial(ss, RUN, "trial_00004", ref)[0] is None


def test_a_fenced_attempt_commits_no_trial_checkpoint(tmp_path: Path) -> None:
    ss = stores(tmp_path)
    ss[0].write_fence(RUN, Lineage().then(1, 0).then(3, 10))
    ts, events = trial_store(ss, generation=2)
    with pytest.raises(FencedError):
        ts.commit(T, 3, FILES)
    assert ss[0].folders(trial_run(RUN, T)) == {} or not any(
        ok for gens in ss[0].folders(trial_run(RUN, T)).values() for ok in gens.values()
    )
    assert "fenced_write" in [e for e, _ in events]


def test_retention_keeps_from_the_oldest_checkpoint_a_kept_snapshot_names() -> None:
    history = [{T: TrialRef(2, 1, "a" * 64)}, {T: TrialRef(4, 2, "b" * 64), "trial_00001": TrialRef(1, 2, "c" * 64)}]
    assert low_water(history) == {T: 2, "trial_00001": 1}
    folders: dict[int, dict[int | None, bool]] = {1: {1: True}, 2: {1: True}, 3: {None: False, 2: True, 5: True}}
    # Below 3: this attempt's and earlier ones' (an old step-only folder too); a successor's never.
    assert doomed_folders(folders, 3, 2) == [(1, 1), (2, 1)]
    assert doomed_folders(folders, 4, 2) == [(1, 1), (2, 1), (3, None), (3, 2)]


def test_prune_deletes_in_every_store_what_no_kept_snapshot_names(tmp_path: Path) -> None:
    ss = stores(tmp_path)
    ts, _ = trial_store(ss)
    for it in (1, 2, 3):
        ts.commit(T, it, {**FILES, "state.pt": bytes([it])})
    ts.prune({T: 2})
    for store in ss:
        assert sorted(store.committed_steps(trial_run(RUN, T))) == [2, 3]


def test_a_store_down_for_its_outage_is_passed_over_once_for_every_trial(tmp_path: Path) -> None:
    ss = stores(tmp_path)
    (tmp_path / "local-a").mkdir()
    (tmp_path / "local-a" / RUN).write_bytes(b"a file where the run's folder goes: every write fails")
    ts, events = trial_store(ss)
    ts.commit(T, 1, FILES)
    ts.commit("trial_00004", 1, FILES)
    assert [e for e, _ in events].count("store_fallback") == 1
    assert ss[1].committed_steps(trial_run(RUN, T)) == ss[1].committed_steps(trial_run(RUN, "trial_00004")) == [1]


def test_a_checkpoint_adopted_from_the_restore_is_named_as_it_is_until_its_trial_moves(tmp_path: Path) -> None:
    ss = stores(tmp_path)
    old, _ = trial_store(ss, generation=1)
    ref = old.commit(T, 3, FILES)
    ts, events = trial_store(ss, generation=2)
    ts.adopt({T: ref})
    assert ts.commit(T, 3, FILES) == ref and events == []  # generation 1's, not uploaded again
    moved = ts.commit(T, 4, {**FILES, "state.pt": b"4"})
    assert moved.attempt == 2 and [e for e, _ in events] == ["trial_checkpointed", "replicated"]


def test_prune_lists_a_trial_again_only_when_its_mark_has_risen(tmp_path: Path) -> None:
    ss = stores(tmp_path)
    ts, _ = trial_store(ss)
    for it in (1, 2, 3):
        ts.commit(T, it, {**FILES, "state.pt": bytes([it])}, source=f"/scratch/{it}")
    assert ts.sources[T] == (ts.committed[T], "/scratch/3")
    listed: list[str] = []
    for store in ss:
        real = store.folders
        store.folders = lambda run, real=real: listed.append(run) or real(run)  # type: ignore[method-assign]
    ts.prune({T: 1})  # nothing below the first iteration: nothing listed
    ts.prune({T: 2})
    ts.prune({T: 2})  # the same mark again: not listed again
    assert listed == [trial_run(RUN, T)] * 2  # once per store
    assert ss[0].committed_steps(trial_run(RUN, T)) == [2, 3]
