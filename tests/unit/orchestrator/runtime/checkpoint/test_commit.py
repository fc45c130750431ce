"""The commit's decisions: retry, fall back to the next region's store, give up for a newer
snapshot, stop for good when fenced; the events each journals. Stores are stand-ins."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.runtime.checkpoint.commit import Committer, Move, after_failure
from orchestrator.runtime.checkpoint.share_plan import ShareReport
from orchestrator.runtime.checkpoint.snapshot import Snapshot, snapshot_of
from recovery.fencing import FencedError
from recovery.manifest import FileEntry, Manifest
from recovery.store import CheckpointStore, StoreError

pytestmark = pytest.mark.unit
RUN = "commit-run"


def test_after_failure_prefers_a_newer_snapshot_then_the_outage() -> None:
    assert after_failure(0.0, 15.0, newer_waiting=True) is Move.SUPERSEDED
    assert after_failure(99.0, 15.0, newer_waiting=True) is Move.SUPERSEDED
    assert after_failure(15.0, 15.0, newer_waiting=False) is Move.FALLBACK
    assert after_failure(14.9, 15.0, newer_waiting=False) is Move.RETRY


class Store:
    """Commits unless told to fail (``fails`` times, or for good with -1) or to refuse (fenced)."""

    def __init__(self, region: str, fails: int = 0, fenced: bool = False) -> None:
        self.region, self.fails, self.fenced = region, fails, fenced
        self.commits: list[tuple[int, list[str], dict[str, object]]] = []
        self.retained = 0

    def commit(self, run_id: str, step: int, attempt: int, files: list[FileEntry], **kw: Any) -> Manifest:
        if self.fenced:
            raise FencedError("a newer generation")
        if self.fails:
            self.fails -= 1
            raise StoreError(f"store {self.region} down")
        self.commits.append((step, sorted(f.name for f in files), kw["extra"]))
        return Manifest(run_id, step, attempt, tuple(files), 1.0, self.region)

    def abort_orphaned_uploads(self, run_id: str) -> list[str]:
        return []

    def retain(self, *a: Any, **k: Any) -> list[int]:
        self.retained += 1
        if self.region == "broken-retention":
            raise StoreError("cannot list")
        return []


def puts(seen: list[tuple[str, Snapshot, bool]], report: ShareReport | None = None) -> Any:
    def put_files(store: CheckpointStore, snap: Snapshot, first_try: bool) -> Any:
        seen.append((store.region, snap, first_try))
        return [FileEntry(n, len(d), "0" * 64) for n, d in snap.files.items()], report

    return put_files


def committer(stores: list[Store], seen: list[Any], events: list[Any], **kw: Any) -> Committer:
    return Committer(
        stores,  # type: ignore[arg-type]
        RUN,
        1,
        keep_last=2,
        put_files=puts(seen, kw.pop("report", None)),
        on_event=lambda t, f: events.append((t, f)),
        **kw,
    )


SNAP = snapshot_of(20, {"model.pt": b"m", "state.pt": b"s"}, {"world_size": 2}, {"model.pt": 1}, {"model.pt": "d"})


def test_a_commit_lists_what_the_puts_returned_with_the_snapshots_extra() -> None:
    store, seen, events = Store("a"), [], []
    m = committer([store], seen, events).commit(SNAP, lambda: False)
    assert m is not None and m.step == 20
    assert store.commits == [(20, ["model.pt", "state.pt"], {"world_size": 2})]
    assert [(r, s.shares, first) for r, s, first in seen] == [("a", {"model.pt": 1}, True)]
    assert events == []


def test_a_store_that_comes_back_is_retried_then_journaled_recovered() -> None:
    store, seen, events = Store("a", fails=2), [], []
    assert committer([store], seen, events).commit(SNAP, lambda: False) is not None
    assert [t for t, _ in events] == ["upload_retry", "upload_recovered"]
    assert [first for _, _, first in seen] == [True, False, False]  # only the first try waits for shares


def test_a_store_down_past_the_outage_falls_back_and_shares_stay_with_the_primary() -> None:
    down, other, seen, events = Store("a", fails=-1), Store("b"), [], []
    c = committer([down, other], seen, events, outage_s=0.0)
    assert c.commit(SNAP, lambda: False) is not None
    assert [t for t, _ in events] == ["upload_retry", "store_fallback"]
    assert events[1][1]["from"] == "a" and events[1][1]["to"] == "b"
    assert c.store is other and other.commits[0][0] == 20
    # The other ranks put their shares into the primary: in the fallback rank 0 puts every file.
    assert [(r, s.shares) for r, s, _ in seen] == [("a", {"model.pt": 1}), ("b", {})]


SHARDED = snapshot_of(30, {"index.json": b"i"}, {}, remote={"shard-r1.pt": (1, 5, "e" * 64)})


def test_a_sharded_snapshot_stays_in_the_store_its_ranks_put_into_and_the_next_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("orchestrator.runtime.checkpoint.commit.time.sleep", lambda s: None)
    down, other, seen, events = Store("a", fails=-1), Store("b"), [], []
    c = committer([down, other], seen, events, outage_s=0.0)
    calls = iter([False] * 5 + [True])  # a newer snapshot arrives after a few retries
    assert c.commit(SHARDED, lambda: next(calls)) is None
    # Every try was in "a", where rank 1's shard is; the outage moved the current store
    # on once (the next snapshot tells the ranks "b"), never round again.
    assert {region for region, _, _ in seen} == {"a"}
    assert [t for t, _ in events].count("store_fallback") == 1 and c.store is other
    assert events[-1][0] == "upload_superseded"
    # The next snapshot, its ranks told "b", commits there.
    told = snapshot_of(40, {"index.json": b"i"}, {}, remote={"shard-r1.pt": (1, 5, "e" * 64)}, store_index=1)
    assert c.commit(told, lambda: False) is not None and other.commits[0][0] == 40


def test_a_newer_snapshot_waiting_ends_the_retries() -> None:
    store, seen, events = Store("a", fails=-1), [], []
    assert committer([store], seen, events).commit(SNAP, lambda: True) is None
    assert [t for t, _ in events] == ["upload_retry", "upload_superseded"]


def test_a_fenced_store_fences_the_committer_for_good() -> None:
    store, seen, events = Store("a", fenced=True), [], []
    c = committer([store], seen, events)
    with pytest.raises(FencedError):
        c.commit(SNAP, lambda: False)
    assert c.fenced and [t for t, _ in events] == ["fenced_write"]


def test_shared_uploads_are_journaled_the_first_time_and_on_a_takeover() -> None:
    store, seen, events = Store("a"), [], []
    smooth = ShareReport({0: 1, 1: 1}, [], 0.0, 0.0)
    c = committer([store], seen, events, report=smooth)
    c.commit(SNAP, lambda: False)
    c.commit(SNAP, lambda: False)
    assert [t for t, _ in events] == ["upload_shared"] and c.last_share is smooth


def test_a_failed_retention_is_journaled_not_raised() -> None:
    store, events = Store("broken-retention"), []
    committer([store], [], events).retain(store)  # type: ignore[arg-type]
    assert store.retained == 1 and [t for t, _ in events] == ["retention_failed"]
