"""Rank 0's part of an upload: its files put into a store, the other ranks' checked, not trusted.

Its own files first (the chaos hook once the first is in), then, for the files another
rank puts (its share, see ``share_plan``; or a file only that rank holds), a bounded
wait until each is in the store holding rank 0's bytes (or the size and sha256 that
rank reported); a share missing or different then, rank 0 puts itself. The manifest
lists each file with its sha256: rank 0's, or the one the rank that alone holds it reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from orchestrator.runtime.checkpoint.puts import put_all
from orchestrator.runtime.checkpoint.share_plan import (
    ShareReport,
    bytes_by_rank,
    delivered_by_rank,
    remote_wait_s,
    share_wait_s,
)
from orchestrator.runtime.checkpoint.snapshot import Snapshot
from recovery.manifest import FileEntry
from recovery.store import CheckpointStore, StoreError

SHARE_POLL_S = 0.05
SHARE_POLL_MAX_S = 0.5


class Rank0Upload:
    """The ``PutFiles`` of rank 0's commits, ``(store, snapshot, first_try) -> (entries,
    report)``: every file of the snapshot in the store, concurrently; ``report`` is None
    when no other rank had a share. Only the first try waits for the other ranks (a
    retry puts what is missing at once)."""

    def __init__(
        self,
        run_id: str,
        pool: ThreadPoolExecutor,
        on_stage: Callable[[int], None] | None = None,
        generation: int | None = None,
    ) -> None:
        self.run_id = run_id
        self.generation = generation  # whose step folder the files go in (recovery/store.py)
        self.pool = pool
        # Called half way through an upload (chaos: a fault "during: checkpoint_upload").
        self.on_stage = on_stage

    def __call__(
        self, store: CheckpointStore, snap: Snapshot, first_try: bool
    ) -> tuple[list[FileEntry], ShareReport | None]:
        files, step, shares = snap.files, snap.step, snap.shares
        staged: list[bool] = []

        def on_first() -> None:
            staged.append(True)
            if self.on_stage is not None:
                self.on_stage(step)

        t0 = time.monotonic()
        mine = [n for n in files if n not in shares]
        entries = put_all(self.pool, store, self.run_id, step, files, mine, on_first, self.generation, snap.digests)
        if snap.remote:
            if not staged:
                on_first()  # nothing of its own to put: the upload is half way now
            entries += self._await_remote(store, snap, time.monotonic() - t0, first_try)
        if not shares:
            return entries, None
        own_s = time.monotonic() - t0
        own_bytes = sum(len(files[n]) for n in files if n not in shares)
        wait_s = share_wait_s(own_s, own_bytes, max(bytes_by_rank(files, shares).values())) if first_try else 0.0
        landed = self._await_shares(store, step, files, shares, wait_s)
        taken = sorted(n for n in shares if n not in landed)
        waited_s = time.monotonic() - t0 - own_s
        # Puts of rank 0's own bytes: whatever rank r writes there later is the same bytes.
        entries += put_all(
            self.pool,
            store,
            self.run_id,
            step,
            files,
            taken,
            None if staged else on_first,
            self.generation,
            snap.digests,
        )
        entries += [FileEntry(n, len(files[n]), snap.digests[n]) for n in sorted(landed)]
        delivered = delivered_by_rank(files, shares, landed, taken)
        return entries, ShareReport(delivered, taken, round(own_s, 4), round(waited_s, 4))

    def _await_remote(self, store: CheckpointStore, snap: Snapshot, own_s: float, first_try: bool) -> list[FileEntry]:
        """The entries of the files other ranks alone hold (a sharded checkpoint), each
        found in ``store`` at the size that rank reported, listed with the sha256 it
        reported (``CheckpointStore.landed``: each byte is hashed once, by the rank that
        put it, and checked on restore); rank 0 cannot put them itself, so one still
        missing after the wait means no commit (StoreError)."""
        remote = snap.remote
        own_bytes = sum(len(d) for d in snap.files.values())
        per_rank: dict[int, int] = {}
        for rank, size, _ in remote.values():
            per_rank[rank] = per_rank.get(rank, 0) + size
        wait_s = remote_wait_s(own_s, own_bytes, max(per_rank.values())) if first_try else 0.0
        pending, deadline, delay = set(remote), time.monotonic() + wait_s, SHARE_POLL_S

        def landed(name: str) -> bool:
            try:
                return store.landed(self.run_id, snap.step, name, remote[name][1], self.generation)
            except StoreError:
                return False

        while True:
            try:
                store.fs.invalidate_cache(
                    store.write_path(self.run_id, snap.step, store.generation_of(self.generation))
                )
            except Exception:  # a cache the client does not keep
                pass
            for name in sorted(pending):
                if landed(name):
                    pending.discard(name)
            left = deadline - time.monotonic()
            if not pending:
                return [FileEntry(n, remote[n][1], remote[n][2]) for n in sorted(remote)]
            if left <= 0:
                name = sorted(pending)[0]
                raise StoreError(
                    f"region {store.region or '?'}: rank {remote[name][0]}'s {name} of step {snap.step} is not in "
                    f"{store.url} at the size it reported ({len(pending)} file(s) missing): not committed"
                )
            time.sleep(min(delay, left))
            delay = min(delay * 2, SHARE_POLL_MAX_S)

    def _await_shares(
        self, store: CheckpointStore, step: int, files: Mapping[str, bytes], shares: Mapping[str, int], wait_s: float
    ) -> set[str]:
        """The shared files found in ``store`` holding this process's bytes (size and the
        store's MD5, or a read back), polled until all are or ``wait_s`` has passed."""
        pending, landed = set(shares), set()
        deadline = time.monotonic() + wait_s
        delay = SHARE_POLL_S

        def holds(name: str) -> bool:
            try:
                store.verify_copy(self.run_id, step, name, files[name], self.generation)
            except StoreError:
                return False  # not there yet, other bytes, or the store failing: not this rank's to judge
            return True

        while True:
            try:
                store.fs.invalidate_cache(store.write_path(self.run_id, step, store.generation_of(self.generation)))
            except Exception:  # a cache the client does not keep
                pass
            names = sorted(pending)
            for name, ok in zip(names, self.pool.map(holds, names), strict=True):
                if ok:
                    landed.add(name)
                    pending.discard(name)
            left = deadline - time.monotonic()
            if not pending or left <= 0:
                return landed
            time.sleep(min(delay, left))
            delay = min(delay * 2, SHARE_POLL_MAX_S)
