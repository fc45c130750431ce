"""A search's snapshot commits after every trial checkpoint it names; unchanged trials are
not uploaded again; trial retention follows the kept snapshots; a fenced attempt stops."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runtime.checkpoint.background import AsyncCheckpointer
from orchestrator.runtime.search.trial_store import TrialRef, TrialStore, fetch_trial, trial_run
from orchestrator.runtime.search.uploads import SearchUploader, SnapshotJob
from recovery.fencing import FencedError, Lineage
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY

pytestmark = pytest.mark.unit
RUN = "test-run"
A, B = "trial_00000", "trial_00001"


def files(tag: int) -> dict[str, bytes]:
    return {"model.pt": bytes([tag]) * 100, "optimizer.pt": b"o" * 50, "state.pt": bytes([tag])}


def uploader(
    tmp_path: Path, keep_last: int = 2
) -> tuple[SearchUploader, list[CheckpointStore], list[tuple[str, dict]]]:
    ss = [CheckpointStore(f"file://{tmp_path}/{r}", region=r, key=TEST_KEY) for r in ("local-a", "local-b")]
    events: list[tuple[str, dict[str, Any]]] = []

    def on_event(t: str, f: dict[str, Any]) -> None:
        events.append((t, f))

    checkpointer = AsyncCheckpointer(ss, RUN, 2, keep_last, outage_s=0.5, on_event=on_event, replicate=True)
    return SearchUploader(checkpointer, TrialStore(ss, RUN, 2, 0.5, on_event), keep_last, on_event), ss, events


def job(step: int, trials: dict[str, tuple[int, dict[str, bytes]]], seen: list[dict[str, TrialRef]]) -> SnapshotJob:
    def pack(refs: dict[str, TrialRef]) -> bytes:
        # Packed once the trials are in the store: every reference is there to read.
        seen.append(dict(refs))
        data = json.dumps({t: r.to_json() for t, r in refs.items()}).encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("search.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    return SnapshotJob(step, trials, pack, {"kind": "hpo_experiment", "search_step": step})


def test_the_snapshot_names_its_trials_checkpoints_committed_before_it_in_every_store(tmp_path: Path) -> None:
    up, ss, events = uploader(tmp_path)
    seen: list[dict[str, TrialRef]] = []
    up.submit(job(3, {A: (2, files(1)), B: (1, files(2))}, seen))
    up.wait()
    (refs,) = seen
    assert sorted(refs) == [A, B] and refs[A].iteration == 2 and refs[A].attempt == 2
    for store in ss:
        m = store.manifest(RUN, 3)
        assert m is not None and store.verify(RUN, 3).ok
        assert m.extra["checkpoints"] == {t: r.to_json() for t, r in refs.items()}
        assert fetch_trial([store], RUN, A, refs[A]) == (files(1), "")
        assert fetch_trial([store], RUN, B, refs[B]) == (files(2), "")
    # The snapshot's commit came after its trials' (and their copies).
    kinds = [t for t, _ in events if t in ("replicated", "checkpoint_committed")]
    assert kinds.index("checkpoint_committed") > 1 and kinds.count("replicated") == 3
    assert up.committed_url == ss[0].checkpoint_url(RUN, 3)


def test_an_unchanged_trial_is_not_uploaded_again_and_retention_follows_the_kept_snapshots(tmp_path: Path) -> None:
    up, ss, events = uploader(tmp_path, keep_last=2)
    seen: list[dict[str, TrialRef]] = []
    up.submit(job(1, {A: (1, files(1)), B: (1, files(2))}, seen))
    up.wait()
    up.submit(job(2, {A: (2, files(3)), B: (1, files(2))}, seen))  # B has not moved
    up.wait()
    assert seen[1][B] == seen[0][B]
    assert ss[0].committed_steps(trial_run(RUN, B)) == [1]
    # Journaled: what each snapshot put into the store, and what one holding its trials would have.
    snaps = [f for t, f in events if t == "search_snapshot"]
    size = sum(map(len, files(1).values()))
    assert [(f["step"], f["trials_named"], f["trials_uploaded"]) for f in snaps] == [(1, 2, 2), (2, 2, 1)]
    assert all(f["bytes_if_held"] - f["bytes_uploaded"] == size * (2 - f["trials_uploaded"]) for f in snaps)
    up.submit(job(3, {A: (3, files(4)), B: (1, files(2))}, seen))
    up.wait()
    # Kept: snapshots 2 and 3, naming A at 2 and 3; A's iteration 1 is named by none.
    for store in ss:
        assert store.committed_steps(RUN) == [2, 3]
        assert store.committed_steps(trial_run(RUN, A)) == [2, 3]
        assert store.committed_steps(trial_run(RUN, B)) == [1]


def test_a_newer_job_replaces_a_waiting_one(tmp_path: Path) -> None:
    up, _, events = uploader(tmp_path)
    seen: list[dict[str, TrialRef]] = []
    up._busy = True  # as if a job were in flight: the next two wait, the newer wins
    with up._cond:
        up._queued = job(1, {A: (1, files(1))}, seen)
    up.submit(job(2, {A: (2, files(2))}, seen))
    assert ("upload_superseded", {"step": 1, "superseded_by": 2}) in events
    up._busy = False
    assert up._queued is not None and up._queued.step == 2


def test_a_fenced_attempt_commits_no_snapshot_and_says_so_at_its_next_wait_and_submit(tmp_path: Path) -> None:
    up, ss, _ = uploader(tmp_path)
    ss[0].write_fence(RUN, Lineage().then(1, 0).then(3, 10))
    seen: list[dict[str, TrialRef]] = []
    up.submit(job(4, {A: (1, files(1))}, seen))
    with pytest.raises(FencedError):
        up.wait()
    assert seen == [] and ss[0].committed_steps(RUN) == []
    with pytest.raises(FencedError):
        up.submit(job(5, {A: (2, files(2))}, seen))


def test_a_finished_trials_final_weights_are_uploaded_once_and_counted_apart(tmp_path: Path) -> None:
    up, ss, events = uploader(tmp_path)
    seen: list[dict[str, TrialRef]] = []
    first = job(1, {A: (1, files(1)), B: (3, files(2))}, seen)
    first.finished = frozenset({B})  # B has ended: its checkpoint is its final weights
    up.submit(first)
    up.wait()
    (snap,) = [f for t, f in events if t == "search_snapshot"]
    size = sum(map(len, files(2).values()))
    assert snap["bytes_final"] == size and snap["trials_uploaded"] == 2
    assert snap["bytes_if_held"] == snap["bytes_uploaded"] - size  # an archive held A alone
    assert fetch_trial(ss, RUN, B, seen[0][B]) == (files(2), "")
