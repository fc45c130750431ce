"""A snapshot's files into a store and the manifest last: retried, fenced, falling back.

- The manifest is written only after every file of the checkpoint is in the store: a
  kill or an error mid-upload leaves an uncommitted folder that restore ignores and
  retention removes.
- How the files get there is the ``PutFiles`` given (``Rank0Upload``: rank 0's own
  files, the other ranks' shares checked); this module only commits what it returns.
- A failing store is retried with backoff. Past ``outage_s`` the committer moves on to
  the next region's store (journaled as ``store_fallback``); a newer snapshot waiting
  ends the retries of an older one (``upload_superseded``).
- A store whose fence names a newer generation refuses the commit: this attempt is
  fenced for good (``fenced_write``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import Enum
from typing import Any

from orchestrator.runtime.checkpoint.share_plan import ShareReport, share_event
from orchestrator.runtime.checkpoint.snapshot import Snapshot
from recovery.fencing import Admits, FencedError
from recovery.manifest import FileEntry, Manifest
from recovery.retry import Backoff
from recovery.store import CheckpointStore, StoreError

BACKOFF_START_S = 0.2
BACKOFF_MAX_S = 2.0

EventHook = Callable[[str, dict[str, Any]], None]
# Every file of a snapshot into a store: (store, snapshot, first try?) -> (the manifest's
# entries, how a shared upload went or None).
PutFiles = Callable[[CheckpointStore, Snapshot, bool], tuple[list[FileEntry], ShareReport | None]]


class Move(Enum):
    """What the committer does after a failed try."""

    RETRY = "retry"  # the same store, after a backoff
    FALLBACK = "fallback"  # the next region's store
    SUPERSEDED = "superseded"  # give this snapshot up: a newer one is waiting


def after_failure(failing_s: float, outage_s: float, newer_waiting: bool) -> Move:
    """A newer snapshot makes this one not worth more retries; a store failing for
    ``outage_s`` is left for the next one."""
    if newer_waiting:
        return Move.SUPERSEDED
    if failing_s >= outage_s:
        return Move.FALLBACK
    return Move.RETRY


class Committer:
    def __init__(
        self,
        stores: list[CheckpointStore],
        run_id: str,
        generation: int,
        keep_last: int,
        put_files: PutFiles,
        outage_s: float = 15.0,
        on_event: EventHook | None = None,
        lineage: Admits | None = None,
    ) -> None:
        assert stores, "at least the primary store"
        self.stores = stores
        self.current = 0
        self.run_id = run_id
        self.generation = generation
        self.keep_last = keep_last
        self.put_files = put_files
        self.outage_s = outage_s
        self.on_event = on_event or (lambda type_, fields: None)
        # What retention keeps: the newest checkpoints on the controller's lineage (None: the newest).
        self.lineage = lineage
        # Across uploads: a snapshot that supersedes a failing one inherits the outage.
        self._failing_since: float | None = None
        self.fenced = False
        self._shared_once = False
        self.last_share: ShareReport | None = None

    @property
    def store(self) -> CheckpointStore:
        return self.stores[self.current]

    def commit(self, snap: Snapshot, newer_waiting: Callable[[], bool]) -> Manifest | None:
        """The snapshot committed in the current store (moving on to the next one if it
        stays down); None if given up for a newer one. Raises FencedError for good.

        A sharded snapshot (files only other ranks hold) commits only in the store those
        ranks were told to put into (``snap.store_index``): an outage there still moves
        the current store on, once, so that the next snapshot tells them the next one,
        and this one is retried where its files are until that newer one supersedes it."""
        step = snap.step
        backoff, failures = Backoff(BACKOFF_START_S, BACKOFF_MAX_S), 0
        first_try = True
        pinned = bool(snap.remote)
        moved = False
        while True:
            store = self.stores[snap.store_index] if pinned else self.store
            try:
                # The other ranks' shares count only in the primary store (where they put them).
                entries, shared = self.put_files(store, snap if store is self.stores[0] else snap.alone(), first_try)
                primary = store.commit(self.run_id, step, self.generation, entries, extra=snap.extra, fenced=True)
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
                move = after_failure(now - self._failing_since, self.outage_s, newer_waiting())
                if move is Move.FALLBACK and pinned and moved:
                    move = Move.RETRY  # the next snapshot goes to the store moved to already
                if move is Move.SUPERSEDED:
                    self.on_event("upload_superseded", {"step": step, "region": store.region})
                    return None
                if move is Move.FALLBACK:
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
                    moved = True
                    continue
                failures += 1
                time.sleep(backoff.delay(failures))
                continue
            if shared is not None:
                self._journal_shares(step, shared)
            if self._failing_since is not None:
                outage = round(time.monotonic() - self._failing_since, 3)
                self.on_event("upload_recovered", {"step": step, "region": store.region, "failing_s": outage})
                self._failing_since = None
            return primary

    def retain(self, store: CheckpointStore) -> None:
        """Retention after a commit; a failure costs only space (the next commit retries it).
        A foreign entry it leaves alone is journaled once as a skipped checkpoint."""
        try:
            store.retain(
                self.run_id,
                self.keep_last,
                lineage=self.lineage,
                attempt=self.generation,
                on_skip=lambda step, reason: self.on_event(
                    "checkpoint_skipped", {"step": step, "region": store.region, "reason": reason}
                ),
            )
        except StoreError as exc:
            self.on_event("retention_failed", {"region": store.region, "error": str(exc)[:300]})

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

    def _journal_shares(self, step: int, report: ShareReport) -> None:
        fields = share_event(step, report, first=not self._shared_once)
        if fields is not None:
            self._shared_once = True
            self.on_event("upload_shared", fields)
        self.last_share = report
