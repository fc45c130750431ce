"""Asynchronous checkpoint upload: snapshot in memory, upload in the background, commit last.

- At most one upload in flight. A snapshot taken while one is in flight waits in
  a queue of one; a newer snapshot replaces it (the newest is the one worth
  having), so training never blocks on storage and memory stays bounded.
- The manifest is written only after every file of the checkpoint is in the
  store: a kill or an error mid-upload leaves an uncommitted folder that restore
  ignores and retention removes.
- A failing store is retried with backoff. Past ``outage_s`` the uploader moves
  on to the next region's store (journaled as ``store_fallback``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from recovery.fencing import Admits, FencedError
from recovery.manifest import Manifest
from recovery.retry import Backoff
from recovery.store import CheckpointStore, StoreError

BACKOFF_START_S = 0.2
BACKOFF_MAX_S = 2.0

Snapshot = tuple[int, dict[str, bytes], dict[str, object]]
EventHook = Callable[[str, dict[str, Any]], None]


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
        from orchestrator.runtime.scratch import LocalCopy

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

    @property
    def store(self) -> CheckpointStore:
        return self.stores[self.current]

    def submit(self, step: int, files: dict[str, bytes], extra: dict[str, object]) -> None:
        """Hand over a snapshot (bytes already taken). Never blocks on storage."""
        if self.fenced:
            raise FencedError(f"attempt {self.generation} is fenced: a newer generation has taken over")
        with self._cond:
            if self._queued is not None:
                self.on_event("upload_superseded", {"step": self._queued[0], "superseded_by": step})
            self._queued = (step, files, extra)
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
                self._upload(*snapshot)
            except BaseException as exc:
                self._error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _abort_orphans(self, store: CheckpointStore) -> None:
        # Only this process writes this run's checkpoints now, so any multipart
        # upload under them is one of ours that the failure cut off.
        try:
            aborted = store.abort_orphaned_uploads(self.run_id)
        except StoreError:
            return  # the store is down; the next failure tries again
        if aborted:
            self.on_event("multipart_aborted", {"region": store.region, "keys": aborted[:10]})

    def _newer_waiting(self) -> bool:
        with self._cond:
            return self._queued is not None

    def _upload(self, step: int, files: dict[str, bytes], extra: dict[str, object]) -> None:
        backoff, failures = Backoff(BACKOFF_START_S, BACKOFF_MAX_S), 0
        while True:
            store = self.store
            try:
                entries = []
                for name, data in files.items():
                    entries.append(store.put(self.run_id, step, name, data))
                    if self.on_stage is not None and len(entries) == 1:
                        self.on_stage(step)
                primary = store.commit(self.run_id, step, self.generation, entries, extra=extra, fenced=True)
            except FencedError as exc:
                self.fenced = True
                self.on_event(
                    "fenced_write",
                    {"step": step, "region": store.region, "attempt": self.generation, "error": str(exc)},
                )
                raise
            except StoreError as exc:
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
            entries = []
            for name, data in files.items():
                entries.append(replica.put(self.run_id, primary.step, name, data))
                replica.verify_copy(self.run_id, primary.step, name, data)
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
