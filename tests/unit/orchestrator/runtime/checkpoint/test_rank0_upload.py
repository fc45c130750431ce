"""Rank 0's puts of a snapshot: its own files, the other ranks' shares checked in the store
and the missing ones put by itself. A stand-in store."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from orchestrator.runtime.checkpoint import share_plan
from orchestrator.runtime.checkpoint.rank0_upload import Rank0Upload
from orchestrator.runtime.checkpoint.snapshot import snapshot_of
from recovery.manifest import FileEntry
from recovery.store import StoreError, sha256_hex

pytestmark = pytest.mark.unit
FILES = {"optimizer.pt": b"o" * 600, "model.pt": b"m" * 300, "state.pt": b"s" * 10}


class Store:
    """Holds what is put; ``landed`` are files another rank already put (with rank 0's bytes)."""

    def __init__(self, landed: dict[str, bytes] | None = None) -> None:
        self.held = dict(landed or {})
        self.put_by_me: list[str] = []
        self.lock = threading.Lock()
        self.fs = self

    def invalidate_cache(self, path: str) -> None:
        pass

    def write_path(self, run_id: str, step: int, generation: int | None) -> str:
        return f"{run_id}/{step}-{generation}"

    def generation_of(self, generation: int | None) -> int | None:
        return generation

    def put(
        self, run_id: str, step: int, name: str, data: bytes, generation: int | None = None, sha256: str | None = None
    ) -> FileEntry:
        with self.lock:
            self.held[name] = data
            self.put_by_me.append(name)
        return FileEntry(name, len(data), sha256_hex(data))

    def verify_copy(self, run_id: str, step: int, name: str, data: bytes, generation: int | None = None) -> None:
        if self.held.get(name) != data:
            raise StoreError(f"{name}: not there or other bytes")


@pytest.fixture
def pool() -> Any:
    with ThreadPoolExecutor(max_workers=4) as p:
        yield p


def test_without_shares_rank_0_puts_everything_and_reports_nothing(pool: ThreadPoolExecutor) -> None:
    store, stages = Store(), []
    entries, report = Rank0Upload("run", pool, stages.append)(store, snapshot_of(20, FILES, {}), True)  # type: ignore[arg-type]
    assert sorted(e.name for e in entries) == sorted(FILES) and report is None
    assert stages == [20]


def test_landed_shares_are_listed_with_rank_0s_digest_and_not_put_again(pool: ThreadPoolExecutor) -> None:
    digest = sha256_hex(FILES["model.pt"])
    store = Store(landed={"model.pt": FILES["model.pt"]})
    snap = snapshot_of(20, FILES, {}, {"model.pt": 1}, {"model.pt": digest})
    entries, report = Rank0Upload("run", pool)(store, snap, True)  # type: ignore[arg-type]
    assert sorted(store.put_by_me) == ["optimizer.pt", "state.pt"]
    assert FileEntry("model.pt", 300, digest) in entries
    assert report is not None and report.taken == [] and report.delivered == {0: 610, 1: 300}


def test_a_missing_or_other_share_is_put_by_rank_0(pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(share_plan, "SHARE_WAIT_MIN_S", 0.05)
    store = Store(landed={"model.pt": b"other bytes"})
    shares = {"model.pt": 1, "state.pt": 2}
    snap = snapshot_of(20, FILES, {}, shares, {n: sha256_hex(FILES[n]) for n in shares})
    entries, report = Rank0Upload("run", pool)(store, snap, True)  # type: ignore[arg-type]
    assert sorted(e.name for e in entries) == sorted(FILES) and store.held == FILES
    assert report is not None and report.taken == ["model.pt", "state.pt"] and report.delivered == {0: 910}


def test_a_retry_does_not_wait_for_the_other_ranks(pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    # A wait would take at least a minute: far from what a loaded machine adds to no wait.
    monkeypatch.setattr(share_plan, "SHARE_WAIT_MIN_S", 60.0)
    store = Store()
    snap = snapshot_of(20, FILES, {}, {"model.pt": 1}, {"model.pt": sha256_hex(FILES["model.pt"])})
    _, report = Rank0Upload("run", pool)(store, snap, False)  # type: ignore[arg-type]
    assert report is not None and report.taken == ["model.pt"] and report.waited_s < 30.0


class HoldingStore(Store):
    """Also answers ``landed`` (a file another rank put, at its size)."""

    region, url = "r", "file:///store"

    def landed(self, run_id: str, step: int, name: str, size: int, generation: int | None = None) -> bool:
        data = self.held.get(name)
        return data is not None and len(data) == size


SHARD = b"r1" * 100


def test_every_ranks_shard_file_in_the_store_is_listed_with_its_reported_digest(pool: ThreadPoolExecutor) -> None:
    store = HoldingStore({"shard-r1.pt": SHARD})
    snap = snapshot_of(8, FILES, {}, remote={"shard-r1.pt": (1, len(SHARD), sha256_hex(SHARD))})
    entries, _ = Rank0Upload("run", pool)(store, snap, True)  # type: ignore[arg-type]
    assert FileEntry("shard-r1.pt", len(SHARD), sha256_hex(SHARD)) in entries
    assert sorted(e.name for e in entries) == sorted([*FILES, "shard-r1.pt"])
    assert "shard-r1.pt" not in store.put_by_me


@pytest.mark.parametrize("landed", [{}, {"shard-r1.pt": SHARD[:-1]}, {"shard-r1.pt": SHARD + b"x"}])
def test_a_rank_file_missing_or_of_another_size_means_no_commit(
    pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch, landed: dict[str, bytes]
) -> None:
    monkeypatch.setattr("orchestrator.runtime.checkpoint.rank0_upload.remote_wait_s", lambda *a: 0.05)
    store = HoldingStore(landed)
    snap = snapshot_of(8, FILES, {}, remote={"shard-r1.pt": (1, len(SHARD), sha256_hex(SHARD))})
    with pytest.raises(StoreError, match=r"rank 1's shard-r1\.pt of step 8 is not in .* at the size it reported"):
        Rank0Upload("run", pool)(store, snap, True)  # type: ignore[arg-type]
    assert store.held.get("shard-r1.pt") == landed.get("shard-r1.pt")  # rank 0 has no bytes to put


def test_a_rank_file_that_lands_during_the_wait_is_committed(pool: ThreadPoolExecutor) -> None:
    store = HoldingStore()
    threading.Timer(0.2, lambda: store.held.__setitem__("shard-r1.pt", SHARD)).start()
    snap = snapshot_of(8, FILES, {}, remote={"shard-r1.pt": (1, len(SHARD), sha256_hex(SHARD))})
    entries, _ = Rank0Upload("run", pool)(store, snap, True)  # type: ignore[arg-type]
    assert "shard-r1.pt" in {e.name for e in entries}
