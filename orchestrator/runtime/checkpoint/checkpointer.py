"""Asynchronous checkpoint upload: snapshot in memory, upload in the background, commit last.

- At most one upload in flight. A snapshot taken while one is in flight waits in
  a queue of one; a newer snapshot replaces it (the newest is the one worth
  having), so training never blocks on storage and memory stays bounded.
- The manifest is written only after every file of the checkpoint is in the
  store: a kill or an error mid-upload leaves an uncommitted folder that restore
  ignores and retention removes.
- A checkpoint's files are put concurrently (UPLOAD_THREADS), so are a replica's.
- A failing store is retried with backoff. Past ``outage_s`` the uploader moves
  on to the next region's store (journaled as ``store_fallback``).
- Shared uploads (more than one worker; DDP ranks hold the same state): rank 0
  still serializes and hashes every file and signs the manifest with the hashes of
  its own bytes, but the files ``assign_shares`` gives to rank r > 0 are put by
  rank r (``ShareUploader``), and only when rank r's bytes have rank 0's sha256 (the
  ranks exchange digests at the snapshot). Before committing, rank 0 checks each
  such file in the store against its own bytes (``CheckpointStore.verify_copy``:
  size and the store's MD5, or a read back) and, after a bounded wait, puts any
  that is missing or differs itself. So a rank that is late, dead or wrong costs
  time, never a bad checkpoint; and since rank r only ever writes rank 0's bytes,
  its write landing after rank 0's own changes nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from concurrent.futures import wait as wait_all
from dataclasses import dataclass, field
from typing import Any

from recovery.fencing import Admits, FencedError
from recovery.manifest import FileEntry, Manifest
from recovery.retry import Backoff
from recovery.store import CheckpointStore, StoreError, read_fence, sha256_hex

BACKOFF_START_S = 0.2
BACKOFF_MAX_S = 2.0
# Files put at once, per store (s3fs also splits a file of 100 MB or more into parts
# sent concurrently).
UPLOAD_THREADS = 4
# How long rank 0 waits for the other ranks' shares once its own is in: at least this
# long, or twice what its own share took, scaled to the largest other share.
SHARE_WAIT_MIN_S = 2.0
SHARE_WAIT_FACTOR = 2.0
SHARE_POLL_S = 0.05
SHARE_POLL_MAX_S = 0.5

EventHook = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Snapshot:
    step: int
    files: dict[str, bytes]
    extra: dict[str, object]
    # Files other ranks put: name -> rank. Their sha256 (of rank 0's bytes) in ``digests``.
    shares: dict[str, int] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ShareReport:
    """How a shared upload went: bytes each rank put (rank 0's takeovers its own),
    the files rank 0 put for another rank, its own share's time and the wait after."""

    delivered: dict[int, int]
    taken: list[str]
    own_s: float
    waited_s: float


def assign_shares(sizes: Mapping[str, int], world: int) -> dict[str, int]:
    """Which rank puts each file: the largest first, each to the rank with the fewest
    bytes so far (ties: the lowest rank), so rank 0 always has the largest file and
    every rank about 1/world of the bytes. Ties in size go by name: every rank that
    computes it gets the same answer."""
    load = [0] * max(1, world)
    out: dict[str, int] = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        rank = min(range(len(load)), key=lambda r: (load[r], r))
        out[name] = rank
        load[rank] += sizes[name]
    return out


def sha256_all(files: Mapping[str, bytes], names: Iterable[str]) -> dict[str, str]:
    """The sha256 of each named file, several at once (hashlib lets go of the GIL)."""
    names = list(names)
    if len(names) <= 1:
        return {n: sha256_hex(files[n]) for n in names}
    with ThreadPoolExecutor(max_workers=min(UPLOAD_THREADS, len(names))) as pool:
        return dict(zip(names, pool.map(lambda n: sha256_hex(files[n]), names), strict=True))


def share_wait_s(own_s: float, own_bytes: int, other_bytes: int) -> float:
    """How long rank 0 waits for the other ranks' files once its own share is in: they
    started when it did, so twice its own time, scaled to the largest other share (at
    most 2x: under ``assign_shares`` no rank gets more than twice rank 0's bytes, since
    rank 0 has the largest file and a rank gets a file only while it has the least)."""
    scale = other_bytes / own_bytes if own_bytes > 0 else 1.0
    return max(SHARE_WAIT_MIN_S, SHARE_WAIT_FACTOR * own_s * min(2.0, max(1.0, scale)))


def put_all(
    pool: ThreadPoolExecutor,
    store: CheckpointStore,
    run_id: str,
    step: int,
    files: Mapping[str, bytes],
    names: Iterable[str],
    on_first: Callable[[], None] | None = None,
) -> list[FileEntry]:
    """Put ``names`` concurrently, the largest first; ``on_first`` once the first is in
    and none has failed. Returns only when every put has ended (no write of this call
    outlives it); raises the first failure."""
    order = sorted(names, key=lambda n: (-len(files[n]), n))
    futures = [pool.submit(store.put, run_id, step, name, files[name]) for name in order]
    entries: list[FileEntry] = []
    error: BaseException | None = None
    try:
        for fut in as_completed(futures):
            try:
                entries.append(fut.result())
            except BaseException as exc:
                error = error or exc
                continue
            if on_first is not None and error is None:
                hook, on_first = on_first, None
                hook()
    finally:
        for fut in futures:
            fut.cancel()
        wait_all(futures)
    if error is not None:
        raise error
    return entries


class CheckpointUploadError(RuntimeError):
    pass


class AsyncCheckpointer:
    def __init__(
        self,
        stores: list[CheckpointStore],
        run_id: str,
        generation: int,
        keep_last: int,
        outage_s: float = 15.0,
        on_event: EventHook | None = None,
        replicate: bool = False,
        on_stage: Callable[[int], None] | None = None,
        scratch_dir: str | None = None,
        lineage: Admits | None = None,
    ) -> None:
        from orchestrator.runtime.checkpoint.scratch import LocalCopy

        # What retention keeps: the newest checkpoints on the controller's lineage (None: the newest).
        self.lineage = lineage
        self.replicate = replicate
        # Called half way through an upload (chaos: a fault "during: checkpoint_upload").
        self.on_stage = on_stage
        self.local = LocalCopy(scratch_dir) if scratch_dir else None
        self._scratch_full = False
        assert stores, "at least the primary store"
        self.stores = stores
        self.current = 0
        self.run_id = run_id
        self.generation = generation
        self.keep_last = keep_last
        self.outage_s = outage_s
        self.on_event = on_event or (lambda type_, fields: None)
        self._cond = threading.Condition()
        self._queued: Snapshot | None = None
        self._busy = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.committed_step: int | None = None
        self.committed_url: str | None = None
        # Across uploads: a snapshot that supersedes a failing one inherits the outage.
        self._failing_since: float | None = None
        self.fenced = False
        self._replica_down_until: dict[str, float] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._files: ThreadPoolExecutor | None = None
        self._shared_once = False
        self.last_share: ShareReport | None = None

    @property
    def store(self) -> CheckpointStore:
        return self.stores[self.current]

    def submit(
        self,
        step: int,
        files: dict[str, bytes],
        extra: dict[str, object],
        shares: Mapping[str, int] | None = None,
        digests: Mapping[str, str] | None = None,
    ) -> None:
        """Hand over a snapshot (bytes already taken). Never blocks on storage.
        ``shares``: files other ranks put (name -> rank), with ``digests``, the sha256
        of this process's bytes of each (see the module's docstring)."""
        if self.fenced:
            raise FencedError(f"attempt {self.generation} is fenced: a newer generation has taken over")
        shared = {n: r for n, r in (shares or {}).items() if r != 0 and n in files and n in (digests or {})}
        snapshot = Snapshot(step, files, extra, shared, {n: (digests or {})[n] for n in shared})
        with self._cond:
            if self._queued is not None:
                self.on_event("upload_superseded", {"step": self._queued.step, "superseded_by": step})
            self._queued = snapshot
            if self._thread is None:
                self._thread = threading.Thread(target=self._worker, name="ckpt-upload", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _in_flight(self) -> bool:
        # Callers hold self._cond.
        return self._queued is not None or self._busy

    @property
    def pending(self) -> bool:
        """An upload is queued or in flight."""
        with self._cond:
            return self._in_flight()

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until everything submitted is committed; re-raise a permanent failure."""
        limit = timeout_s if timeout_s is not None else self.outage_s * (len(self.stores) + 1) + 30
        deadline = time.monotonic() + limit
        with self._cond:
            while self._in_flight():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CheckpointUploadError(
                        f"checkpoint upload not committed after {limit:.0f}s; stores: "
                        + ", ".join(s.url for s in self.stores)
                    )
                self._cond.wait(timeout=min(left, 0.5))
            if self._error is not None:
                err, self._error = self._error, None
                raise CheckpointUploadError(f"checkpoint upload failed: {err}") from err

    def _worker(self) -> None:
        while True:
            with self._cond:
                while self._queued is None:
                    self._cond.wait()
                snapshot, self._queued = self._queued, None
                self._busy = True
            try:
                self._upload(snapshot)
            except BaseException as exc:
                self._error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _abort_orphans(self, store: CheckpointStore) -> None:
        # Only this attempt writes this run's checkpoints now, so any multipart upload
        # under them is one the failure cut off (another rank's share included: rank
        # 0 puts whatever is missing).
        try:
            aborted = store.abort_orphaned_uploads(self.run_id)
        except StoreError:
            return  # the store is down; the next failure tries again
        if aborted:
            self.on_event("multipart_aborted", {"region": store.region, "keys": aborted[:10]})

    def _newer_waiting(self) -> bool:
        with self._cond:
            return self._queued is not None

    def _files_pool(self) -> ThreadPoolExecutor:
        if self._files is None:
            self._files = ThreadPoolExecutor(max_workers=UPLOAD_THREADS, thread_name_prefix="ckpt-put")
        return self._files

    def _upload(self, snap: Snapshot) -> None:
        step, files, extra = snap.step, snap.files, snap.extra
        backoff, failures = Backoff(BACKOFF_START_S, BACKOFF_MAX_S), 0
        first_try = True
        while True:
            store = self.store
            try:
                entries, shared = self._put_files(store, snap, first_try)
                primary = store.commit(self.run_id, step, self.generation, entries, extra=extra, fenced=True)
            except FencedError as exc:
                self.fenced = True
                self.on_event(
                    "fenced_write",
                    {"step": step, "region": store.region, "attempt": self.generation, "error": str(exc)},
                )
                raise
            except StoreError as exc:
                first_try = False
                self._abort_orphans(store)
                now = time.monotonic()
                if self._failing_since is None:
                    self._failing_since = now
                    self.on_event("upload_retry", {"step": step, "region": store.region, "error": str(exc)[:300]})
                if self._newer_waiting():
                    # A newer snapshot exists: this one is not worth more retries.
                    self.on_event("upload_superseded", {"step": step, "region": store.region})
                    return
                if now - self._failing_since >= self.outage_s:
                    nxt = (self.current + 1) % len(self.stores)
                    self.on_event(
                        "store_fallback",
                        {
                            "step": step,
                            "from": store.region,
                            "to": self.stores[nxt].region,
                            "failing_s": round(now - self._failing_since, 3),
                        },
                    )
                    self.current = nxt
                    self._failing_since, failures = None, 0
                    continue
                failures += 1
                time.sleep(backoff.delay(failures))
                continue
            if shared is not None:
                self._journal_shares(snap, shared)
            if self._failing_since is not None:
                outage = round(time.monotonic() - self._failing_since, 3)
                self.on_event("upload_recovered", {"step": step, "region": store.region, "failing_s": outage})
                self._failing_since = None
            self.committed_step = step
            self.committed_url = store.checkpoint_url(self.run_id, step)
            self._keep_local(primary, files)
            if self.replicate:
                self._replicate(primary, files)
            try:
                store.retain(self.run_id, self.keep_last, lineage=self.lineage, attempt=self.generation)
            except StoreError as exc:
                self.on_event("retention_failed", {"region": store.region, "error": str(exc)[:300]})
            return

    def _put_files(
        self, store: CheckpointStore, snap: Snapshot, first_try: bool
    ) -> tuple[list[FileEntry], ShareReport | None]:
        """Every file of ``snap`` into ``store``, concurrently, the chaos hook once the
        first is in; the entries the manifest lists. The other ranks' shares count only
        in the primary store (where they put them); only the first try waits for them."""
        files, step = snap.files, snap.step
        shares = snap.shares if store is self.stores[0] else {}
        staged: list[bool] = []

        def on_first() -> None:
            staged.append(True)
            if self.on_stage is not None:
                self.on_stage(step)

        pool = self._files_pool()
        t0 = time.monotonic()
        entries = put_all(pool, store, self.run_id, step, files, [n for n in files if n not in shares], on_first)
        if not shares:
            return entries, None
        own_s = time.monotonic() - t0
        by_rank: dict[int, int] = {}
        for name, rank in shares.items():
            by_rank[rank] = by_rank.get(rank, 0) + len(files[name])
        own_bytes = sum(len(files[n]) for n in files if n not in shares)
        wait_s = share_wait_s(own_s, own_bytes, max(by_rank.values())) if first_try else 0.0
        landed = self._await_shares(store, step, files, shares, wait_s)
        taken = sorted(n for n in shares if n not in landed)
        waited_s = time.monotonic() - t0 - own_s
        # Puts of rank 0's own bytes: whatever rank r writes there later is the same bytes.
        entries += put_all(pool, store, self.run_id, step, files, taken, None if staged else on_first)
        entries += [FileEntry(n, len(files[n]), snap.digests[n]) for n in sorted(landed)]
        delivered = {0: own_bytes + sum(len(files[n]) for n in taken)}
        for name in landed:
            delivered[shares[name]] = delivered.get(shares[name], 0) + len(files[name])
        return entries, ShareReport(delivered, taken, round(own_s, 4), round(waited_s, 4))

    def _await_shares(
        self, store: CheckpointStore, step: int, files: Mapping[str, bytes], shares: Mapping[str, int], wait_s: float
    ) -> set[str]:
        """The shared files found in ``store`` holding this process's bytes (size and the
        store's MD5, or a read back), polled until all are or ``wait_s`` has passed."""
        pool = self._files_pool()
        pending, landed = set(shares), set()
        deadline = time.monotonic() + wait_s
        delay = SHARE_POLL_S

        def holds(name: str) -> bool:
            try:
                store.verify_copy(self.run_id, step, name, files[name])
            except StoreError:
                return False  # not there yet, other bytes, or the store failing: not this rank's to judge
            return True

        while True:
            try:
                store.fs.invalidate_cache(store.step_path(self.run_id, step))
            except Exception:  # a cache the client does not keep
                pass
            names = sorted(pending)
            for name, ok in zip(names, pool.map(holds, names), strict=True):
                if ok:
                    landed.add(name)
                    pending.discard(name)
            left = deadline - time.monotonic()
            if not pending or left <= 0:
                return landed
            time.sleep(min(delay, left))
            delay = min(delay * 2, SHARE_POLL_MAX_S)

    def _journal_shares(self, snap: Snapshot, report: ShareReport) -> None:
        """One event when a rank's share had to be put by rank 0 (late, dead or other
        bytes), and the first shared upload of the attempt: not one per checkpoint."""
        if report.taken or not self._shared_once:
            self._shared_once = True
            self.on_event(
                "upload_shared",
                {
                    "step": snap.step,
                    "bytes_by_rank": {str(r): n for r, n in sorted(report.delivered.items())},
                    "taken_over": report.taken[:20],
                    "own_s": report.own_s,
                    "waited_s": report.waited_s,
                },
            )
        self.last_share = report

    def _keep_local(self, primary: Manifest, files: dict[str, bytes]) -> None:
        if self.local is None:
            return
        try:
            self.local.keep(primary, files)
        except OSError as exc:
            if not self._scratch_full:  # once per episode: a full disk stays full a while
                self.on_event("scratch_full", {"step": primary.step, "path": self.local.root, "error": str(exc)[:300]})
            self._scratch_full = True
            return
        if self._scratch_full:
            self.on_event("scratch_recovered", {"step": primary.step, "path": self.local.root})
        self._scratch_full = False

    def _replicate(self, primary: Manifest, files: dict[str, bytes]) -> None:
        """Copy the checkpoint just committed to the other regions' stores, from memory
        and in parallel, each file verified after the copy, the manifest last. The
        controller's replicator catches up on whatever this misses."""
        if self._newer_waiting():
            return  # a newer snapshot is waiting: it is the one worth copying
        source = self.store
        now = time.monotonic()
        targets = [s for s in self.stores if s is not source and now >= self._replica_down_until.get(s.region, 0.0)]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.stores) - 1), thread_name_prefix="replica")
        for fut in [self._pool.submit(self._replicate_to, r, source, primary, files) for r in targets]:
            fut.result()

    def _replicate_to(
        self, replica: CheckpointStore, source: CheckpointStore, primary: Manifest, files: dict[str, bytes]
    ) -> None:
        t0 = time.monotonic()
        try:
            entries = list(self._files_pool().map(lambda n: self._copy_one(replica, primary.step, n, files[n]), files))
            copy = replica.commit(
                self.run_id,
                primary.step,
                self.generation,
                entries,
                extra={**primary.extra, "replica_of": source.region},
                fenced=True,
            )
            replica.retain(self.run_id, self.keep_last, lineage=self.lineage, attempt=self.generation)
        except (StoreError, FencedError, OSError) as exc:
            # Stop trying this store for a while: a hung one would hold up every upload.
            self._replica_down_until[replica.region] = time.monotonic() + self.outage_s
            self.on_event("replication_failed", {"to": replica.region, "error": str(exc)[:300]})
            return
        self.on_event(
            "replicated",
            {
                "step": primary.step,
                "from": source.region,
                "to": replica.region,
                "lag_s": round(copy.committed_at - primary.committed_at, 4),
                "copy_s": round(time.monotonic() - t0, 4),
                "bytes": sum(len(d) for d in files.values()),
            },
        )

    def _copy_one(self, replica: CheckpointStore, step: int, name: str, data: bytes) -> FileEntry:
        entry = replica.put(self.run_id, step, name, data)
        replica.verify_copy(self.run_id, step, name, data)
        return entry


class ShareUploader:
    """Rank r > 0's part of a shared upload: put the files rank 0 assigned to this rank
    into the primary store, best effort, in the background.

    A file is put only when this rank's bytes have the sha256 rank 0 gave for it (so
    every write here is of rank 0's bytes, whenever it lands), and not at all once the
    store's fence names a newer generation. Nothing is retried and nothing raised: rank
    0 checks every file before it commits and puts what is missing itself. At most one
    share in flight and one waiting; a newer one replaces the waiting one."""

    def __init__(self, store: CheckpointStore, run_id: str, generation: int) -> None:
        self.store = store
        self.run_id = run_id
        self.generation = generation
        self._cond = threading.Condition()
        self._queued: tuple[int, dict[str, bytes], dict[str, str]] | None = None
        self._busy = False
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.fenced = False
        # What happened to each file of the last share: "put", "other_bytes", "failed", "fenced".
        self.last: dict[str, str] = {}

    def submit(self, step: int, files: dict[str, bytes], digests: Mapping[str, str]) -> None:
        """Hand over this rank's share (its own bytes) and rank 0's sha256 of each file."""
        if not files or self.fenced:
            return
        with self._cond:
            self._queued = (step, files, dict(digests))
            if self._thread is None:
                self._thread = threading.Thread(target=self._worker, name="ckpt-share", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait(self, timeout_s: float) -> bool:
        """Until the shares handed over are put (or given up); False if ``timeout_s`` ran out."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queued is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(timeout=min(left, 0.5))
        return True

    def _worker(self) -> None:
        while True:
            with self._cond:
                while self._queued is None:
                    self._cond.wait()
                (step, files, digests), self._queued = self._queued, None
                self._busy = True
            try:
                self.last = self._put_share(step, files, digests)
            except Exception:  # best effort: rank 0 puts whatever is missing
                pass
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _put_share(self, step: int, files: dict[str, bytes], digests: dict[str, str]) -> dict[str, str]:
        try:
            fence = read_fence(self.store, self.run_id)
        except StoreError:
            return dict.fromkeys(files, "failed")  # a torn fence may hide a newer generation
        if fence is not None and fence.generation > self.generation:
            self.fenced = True
            return dict.fromkeys(files, "fenced")
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=UPLOAD_THREADS, thread_name_prefix="ckpt-share-put")

        def put(name: str) -> str:
            data = files[name]
            if sha256_hex(data) != digests.get(name):
                return "other_bytes"
            try:
                self.store.put(self.run_id, step, name, data)
            except Exception:  # any store or client error: rank 0 puts it
                return "failed"
            return "put"

        names = sorted(files, key=lambda n: (-len(files[n]), n))
        return dict(zip(names, self._pool.map(put, names), strict=True))
