"""The uploader's data path: files put concurrently with the manifest last, retries, the
chaos hook once per try, and shared uploads (each rank its share, rank 0 checks every
file and puts what is missing or differs before it commits). Real ``file://`` stores,
and for the ordering, a store that records what it was asked."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runtime.checkpoint import share_plan as ck
from orchestrator.runtime.checkpoint.background import AsyncCheckpointer, CheckpointUploadError
from orchestrator.runtime.checkpoint.share_plan import assign_shares, remote_wait_s, sha256_all, share_wait_s
from orchestrator.runtime.checkpoint.share_upload import ShareUpload
from recovery.manifest import FileEntry
from recovery.store import CheckpointStore, StoreError, sha256_hex
from tests.support.stores import TEST_KEY

RUN = "ckpt-run"


# --- who puts what ---------------------------------------------------------------------------


def test_assign_shares_balances_bytes_largest_first_and_gives_rank_0_the_largest() -> None:
    sizes = {"optimizer.pt": 200, "model.pt": 100, "state.pt": 1, "scheduler.pt": 1, "workload.pt": 90}
    owner = assign_shares(sizes, 2)
    assert owner == {"optimizer.pt": 0, "model.pt": 1, "workload.pt": 1, "scheduler.pt": 1, "state.pt": 1}
    load = [sum(sizes[n] for n, r in owner.items() if r == rank) for rank in (0, 1)]
    assert load == [200, 192]


def test_assign_shares_is_the_same_whatever_the_order_and_ties_go_by_name() -> None:
    sizes = {"b": 10, "a": 10, "c": 10, "d": 10}
    assert assign_shares(sizes, 2) == assign_shares(dict(reversed(list(sizes.items()))), 2)
    assert assign_shares(sizes, 2) == {"a": 0, "b": 1, "c": 0, "d": 1}


def test_assign_shares_with_one_rank_or_more_ranks_than_files() -> None:
    sizes = {"model.pt": 5, "optimizer.pt": 9}
    assert assign_shares(sizes, 1) == {"model.pt": 0, "optimizer.pt": 0}
    assert assign_shares(sizes, 4) == {"optimizer.pt": 0, "model.pt": 1}
    assert assign_shares({}, 3) == {}


def test_share_wait_is_bounded_below_and_scales_with_the_largest_other_share() -> None:
    assert share_wait_s(0.01, 100, 100) == ck.SHARE_WAIT_MIN_S
    assert share_wait_s(10.0, 100, 100) == 20.0
    assert share_wait_s(10.0, 100, 150) == 30.0  # rank r has 1.5 times rank 0's bytes
    assert share_wait_s(10.0, 1, 10**9) == 40.0  # never more than twice (see assign_shares)
    assert share_wait_s(10.0, 0, 300) == 20.0


def test_files_only_another_rank_holds_are_awaited_as_long_as_their_bytes_take() -> None:
    floor = ck.REMOTE_FLOOR_BYTES_PER_S
    assert remote_wait_s(0.01, 100, 100) == ck.SHARE_WAIT_MIN_S
    assert remote_wait_s(10.0, 100, 150) == 20.0  # twice rank 0's own time
    # At rank 0's own rate: 1 GB in 10 s, the other rank's 2 GB awaited 40 s.
    assert remote_wait_s(10.0, 10**9, 2 * 10**9) == 40.0
    # A rank 0 that wrote an index alone (its "rate" is latency): never below the floor rate.
    assert remote_wait_s(0.01, 1000, 2**30) == 2 * 2**30 / floor


def test_under_assign_shares_no_rank_has_more_than_twice_rank_0s_bytes() -> None:
    import random

    rng = random.Random(7)
    for _ in range(300):
        sizes = {f"f{i}": rng.choice([1, 10, 1000, rng.randrange(1, 10**6)]) for i in range(rng.randrange(1, 12))}
        world = rng.randrange(1, 6)
        owner = assign_shares(sizes, world)
        load = [sum(sizes[n] for n, r in owner.items() if r == rank) for rank in range(world)]
        assert max(load) <= 2 * load[0], (sizes, world, load)


def test_sha256_all_hashes_each_named_file() -> None:
    files = {"a": b"x" * 5000, "b": b"y" * 5000, "c": b"z"}
    assert sha256_all(files, ["a", "b"]) == {"a": sha256_hex(files["a"]), "b": sha256_hex(files["b"])}


# --- concurrency and ordering, against a store that records --------------------------------


class Recording:
    """A CheckpointStore stand-in: puts block until ``together`` of them are in flight
    (so a sequential uploader cannot pass), ``fail`` lists names whose first put fails."""

    def __init__(self, region: str = "r", together: int = 1, fail: tuple[str, ...] = ()) -> None:
        self.region, self.url = region, f"memory://{region}"
        self.log: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(together) if together > 1 else None
        self.fail = set(fail)
        self.in_flight = 0
        self.peak = 0

    def put(
        self, run_id: str, step: int, name: str, data: bytes, generation: int | None = None, sha256: str | None = None
    ) -> FileEntry:
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.log.append(("put-start", name))
        try:
            if self.barrier is not None:
                self.barrier.wait(timeout=10)  # raises BrokenBarrierError if puts do not overlap
            with self.lock:
                if name in self.fail:
                    self.fail.discard(name)
                    raise StoreError(f"store {self.url}: cannot write {name}")
            return FileEntry(name, len(data), sha256_hex(data))
        finally:
            with self.lock:
                self.in_flight -= 1
                self.log.append(("put-end", name))

    def commit(self, run_id: str, step: int, attempt: int, files: Any, **kw: Any) -> Any:
        from recovery.manifest import Manifest

        with self.lock:
            self.log.append(("commit", ",".join(sorted(f.name for f in files))))
        return Manifest(run_id, step, attempt, tuple(sorted(files, key=lambda f: f.name)), 1.0, self.region)

    def abort_orphaned_uploads(self, run_id: str) -> list[str]:
        return []

    def retain(self, *a: Any, **k: Any) -> list[int]:
        return []

    def checkpoint_url(self, run_id: str, step: int) -> str:
        return f"{self.url}/{run_id}/step-{step}-g1"


FILES = {"model.pt": b"m" * 300, "optimizer.pt": b"o" * 600, "state.pt": b"s" * 10, "rng-rank0.pt": b"r" * 20}


def test_files_are_put_concurrently_and_the_manifest_only_after_every_one() -> None:
    store = Recording(together=len(FILES))  # every put waits until all four are in flight
    stages: list[int] = []
    ckpt = AsyncCheckpointer([store], RUN, 1, keep_last=2, on_stage=stages.append)  # type: ignore[list-item]
    ckpt.submit(20, dict(FILES), {})
    ckpt.wait(timeout_s=20)
    assert store.peak == len(FILES)
    assert store.log[-1] == ("commit", ",".join(sorted(FILES)))
    assert [e for e, _ in store.log[:-1]].count("put-end") == len(FILES)
    assert stages == [20]  # the hook: once, half way (files in, no manifest)
    assert ckpt.committed_step == 20


def test_a_failing_put_is_retried_and_the_hook_runs_once_per_try() -> None:
    store = Recording(fail=("optimizer.pt",))
    events: list[tuple[str, dict[str, Any]]] = []
    stages: list[int] = []
    ckpt = AsyncCheckpointer(
        [store],  # type: ignore[list-item]
        RUN,
        1,
        keep_last=2,
        on_event=lambda t, f: events.append((t, f)),
        on_stage=stages.append,
    )
    ckpt.submit(40, dict(FILES), {})
    ckpt.wait(timeout_s=20)
    kinds = [t for t, _ in events]
    assert kinds == ["upload_retry", "upload_recovered", "checkpoint_committed"]
    commits = [what for kind, what in store.log if kind == "commit"]
    assert commits == [",".join(sorted(FILES))]
    # Every put of the failed try ended before the retry began: no write outlives its try.
    first_commit = store.log.index(("commit", commits[0]))
    assert [e for e, _ in store.log[:first_commit]].count("put-start") == 2 * len(FILES)
    # The optimizer (the largest, so put first) failed; the hook ran in the try where
    # a file landed before any failure, and in the retry: at most once per try.
    assert 1 <= len(stages) <= 2 and set(stages) == {40}


def test_a_failing_hook_ends_the_upload_without_a_manifest_and_after_every_put() -> None:
    store = Recording()

    def hook(step: int) -> None:
        raise RuntimeError("injected")

    ckpt = AsyncCheckpointer([store], RUN, 1, keep_last=2, on_stage=hook)  # type: ignore[list-item]
    ckpt.submit(60, dict(FILES), {})
    with pytest.raises(CheckpointUploadError, match="injected"):
        ckpt.wait(timeout_s=20)
    assert not [e for e in store.log if e[0] == "commit"]
    starts = sum(1 for e, _ in store.log if e == "put-start")
    assert starts == sum(1 for e, _ in store.log if e == "put-end")


def test_replicas_are_copied_concurrently_each_file_verified_and_their_manifest_last(tmp_path: Path) -> None:
    primary = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    replica = CheckpointStore(f"file://{tmp_path}/b", region="b", key=TEST_KEY)
    events: list[tuple[str, dict[str, Any]]] = []
    ckpt = AsyncCheckpointer([primary, replica], RUN, 1, keep_last=2, on_event=lambda t, f: events.append((t, f)))
    ckpt.replicate = True
    ckpt.submit(20, dict(FILES), {})
    ckpt.wait(timeout_s=20)
    assert [t for t, _ in events] == ["checkpoint_committed", "replicated"]
    committed = events[0][1]
    assert committed["step"] == 20 and committed["files"] == len(FILES) and committed["commit_s"] >= 0
    assert committed["bytes"] == sum(len(d) for d in FILES.values())
    for store in (primary, replica):
        m = store.latest_verified(RUN)
        assert m is not None and m.step == 20 and {f.name for f in m.files} == set(FILES)


# --- shared uploads, real stores ----------------------------------------------------------------


def _stores(tmp_path: Path) -> tuple[CheckpointStore, CheckpointStore]:
    url = f"file://{tmp_path}/store"
    # The same store as each rank opens it: its own client.
    return CheckpointStore(url, region="a", key=TEST_KEY), CheckpointStore(url, region="a", key=TEST_KEY)


def _plan(files: dict[str, bytes], world: int) -> tuple[dict[str, int], dict[str, str]]:
    owner = assign_shares({n: len(d) for n, d in files.items()}, world)
    shares = {n: r for n, r in owner.items() if r != 0}
    return shares, sha256_all(files, shares)


def _share_of(files: dict[str, bytes], shares: dict[str, int], rank: int) -> dict[str, bytes]:
    return {n: files[n] for n, r in shares.items() if r == rank}


def test_each_rank_puts_its_share_and_rank_0_commits_what_it_checked(tmp_path: Path) -> None:
    rank0, rank1 = _stores(tmp_path)
    files = dict(FILES)
    shares, digests = _plan(files, 2)
    assert set(shares) == {"model.pt", "rng-rank0.pt", "state.pt"}
    share = ShareUpload(rank1, RUN, 1)
    share.submit(20, _share_of(files, shares, 1), digests)
    assert share.wait(20)
    assert share.last == dict.fromkeys(shares, "put")
    events: list[tuple[str, dict[str, Any]]] = []
    ckpt = AsyncCheckpointer([rank0], RUN, 1, keep_last=2, on_event=lambda t, f: events.append((t, f)))
    ckpt.submit(20, files, {}, shares=shares, digests=digests)
    ckpt.wait(timeout_s=20)
    m = rank0.latest_verified(RUN)
    assert m is not None and m.step == 20 and {f.name for f in m.files} == set(files)
    assert ckpt.last_share is not None and ckpt.last_share.taken == []
    assert ckpt.last_share.delivered == {0: 600, 1: 330}
    # Journaled: the attempt's first shared upload, with each rank's bytes.
    events[:] = [e for e in events if e[0] != "checkpoint_committed"]
    assert events == [
        (
            "upload_shared",
            {
                "step": 20,
                "bytes_by_rank": {"0": 600, "1": 330},
                "taken_over": [],
                "own_s": ckpt.last_share.own_s,
                "waited_s": ckpt.last_share.waited_s,
            },
        )
    ]
    # A second one as smooth is not journaled again.
    share.submit(40, _share_of(files, shares, 1), digests)
    share.wait(20)
    ckpt.submit(40, files, {}, shares=shares, digests=digests)
    ckpt.wait(timeout_s=20)
    assert [t for t, _ in events] == ["upload_shared", "checkpoint_committed"]


def test_a_share_that_never_comes_is_put_by_rank_0_after_a_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ck, "SHARE_WAIT_MIN_S", 0.2)
    rank0, _ = _stores(tmp_path)
    files = dict(FILES)
    shares, digests = _plan(files, 2)
    events: list[tuple[str, dict[str, Any]]] = []
    ckpt = AsyncCheckpointer([rank0], RUN, 1, keep_last=2, on_event=lambda t, f: events.append((t, f)))
    ckpt.submit(20, files, {}, shares=shares, digests=digests)  # rank 1 is dead: nothing comes
    ckpt.wait(timeout_s=20)
    m = rank0.latest_verified(RUN)
    assert m is not None and {f.name for f in m.files} == set(files)
    assert events[0][0] == "upload_shared"
    assert events[0][1]["taken_over"] == sorted(shares)
    assert events[0][1]["bytes_by_rank"] == {"0": sum(len(d) for d in files.values())}


def test_a_rank_with_other_bytes_puts_nothing_and_rank_0_puts_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ck, "SHARE_WAIT_MIN_S", 0.2)
    rank0, rank1 = _stores(tmp_path)
    files = dict(FILES)
    shares, digests = _plan(files, 2)
    theirs = {n: b"diverged" + d for n, d in _share_of(files, shares, 1).items()}
    share = ShareUpload(rank1, RUN, 1)
    share.submit(20, theirs, digests)
    share.wait(20)
    assert set(share.last.values()) == {"other_bytes"}
    assert rank0.all_steps(RUN) == {}  # not a byte written
    ckpt = AsyncCheckpointer([rank0], RUN, 1, keep_last=2)
    ckpt.submit(20, files, {}, shares=shares, digests=digests)
    ckpt.wait(timeout_s=20)
    m = rank0.latest_verified(RUN)
    assert m is not None and all(rank0.read(m, n) == files[n] for n in files)
    assert ckpt.last_share is not None and ckpt.last_share.taken == sorted(shares)


def test_other_bytes_already_in_the_store_are_replaced_before_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Say a rank wrote another file's bytes there (a bug, a stray writer): rank 0's check
    compares the store's copy with its own bytes, so the commit is of its own bytes."""
    monkeypatch.setattr(ck, "SHARE_WAIT_MIN_S", 0.2)
    rank0, rank1 = _stores(tmp_path)
    files = dict(FILES)
    shares, digests = _plan(files, 2)
    for name in shares:
        rank1.put(RUN, 20, name, b"stray " + files[name])
    ckpt = AsyncCheckpointer([rank0], RUN, 1, keep_last=2)
    ckpt.submit(20, files, {}, shares=shares, digests=digests)
    ckpt.wait(timeout_s=20)
    m = rank0.latest_verified(RUN)
    assert m is not None and all(rank0.read(m, n) == files[n] for n in files)


def test_a_late_share_lands_on_a_committed_checkpoint_and_it_still_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 gave up waiting and put the share itself; rank 1's puts land after the
    commit: they are rank 0's bytes (rank 1 checked the digests), so nothing changes."""
    monkeypatch.setattr(ck, "SHARE_WAIT_MIN_S", 0.1)
    rank0, rank1 = _stores(tmp_path)
    files = dict(FILES)
    shares, digests = _plan(files, 2)
    ckpt = AsyncCheckpointer([rank0], RUN, 1, keep_last=2)
    ckpt.submit(20, files, {}, shares=shares, digests=digests)
    ckpt.wait(timeout_s=20)
    share = ShareUpload(rank1, RUN, 1)
    share.submit(20, _share_of(files, shares, 1), digests)
    share.wait(20)
    assert set(share.last.values()) == {"put"}
    assert rank0.verify(RUN, 20).ok


def test_shares_count_only_in_the_primary_store(tmp_path: Path) -> None:
    """After a fallback rank 0 puts everything itself: the other ranks write to the primary."""
    down = CheckpointStore(f"file://{tmp_path}/down", region="a", key=TEST_KEY)
    (tmp_path / "down").write_text("a file where the store's folder should be")
    fallback = CheckpointStore(f"file://{tmp_path}/b", region="b", key=TEST_KEY)
    files = dict(FILES)
    shares, digests = _plan(files, 2)
    events: list[str] = []
    ckpt = AsyncCheckpointer(
        [down, fallback], RUN, 1, keep_last=2, outage_s=0.2, on_event=lambda t, f: events.append(t)
    )
    ckpt.submit(20, files, {}, shares=shares, digests=digests)
    ckpt.wait(timeout_s=20)
    assert "store_fallback" in events and "upload_shared" not in events
    m = fallback.latest_verified(RUN)
    assert m is not None and {f.name for f in m.files} == set(files)
