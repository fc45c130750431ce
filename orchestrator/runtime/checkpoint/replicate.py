"""A checkpoint just committed, copied to the other regions' stores from memory.

In parallel, each file verified after the copy, the replica's manifest last. A store
that fails is left alone for ``outage_s`` (a hung one would hold up every upload);
the controller's replicator catches up on whatever this misses.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from orchestrator.runtime.checkpoint.commit import EventHook
from recovery.fencing import Admits, FencedError
from recovery.manifest import FileEntry, Manifest, ManifestError
from recovery.store import CheckpointStore, StoreError


def replica_targets(
    stores: list[CheckpointStore], source: CheckpointStore, down_until: dict[str, float], now: float
) -> list[CheckpointStore]:
    """Every store but the source, less those left alone until later."""
    return [s for s in stores if s is not source and now >= down_until.get(s.region, 0.0)]


class Replicator:
    def __init__(
        self,
        stores: list[CheckpointStore],
        run_id: str,
        generation: int,
        keep_last: int,
        files_pool: ThreadPoolExecutor,
        outage_s: float,
        on_event: EventHook,
        lineage: Admits | None = None,
    ) -> None:
        self.stores = stores
        self.run_id = run_id
        self.generation = generation
        self.keep_last = keep_last
        self.files_pool = files_pool
        self.outage_s = outage_s
        self.on_event = on_event
        self.lineage = lineage
        self._down_until: dict[str, float] = {}
        self._pool: ThreadPoolExecutor | None = None

    def replicate(self, source: CheckpointStore, primary: Manifest, files: dict[str, bytes]) -> None:
        """Copy ``primary`` (committed in ``source``) to every other store not left alone."""
        targets = replica_targets(self.stores, source, self._down_until, time.monotonic())
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.stores) - 1), thread_name_prefix="replica")
        for fut in [self._pool.submit(self._replicate_to, r, source, primary, files) for r in targets]:
            fut.result()

    def _replicate_to(
        self, replica: CheckpointStore, source: CheckpointStore, primary: Manifest, files: dict[str, bytes]
    ) -> None:
        t0 = time.monotonic()
        try:
            entries = list(self.files_pool.map(lambda n: self._copy_one(replica, primary.step, n, files[n]), files))
            # A sharded checkpoint's other ranks' files: read back from the source, verified
            # against its manifest, one at a time (never every rank's bytes at once).
            for entry in primary.files:
                if entry.name not in files:
                    data = source.read(primary, entry.name)
                    entries.append(self._copy_one(replica, primary.step, entry.name, data))
                    del data
            copy = replica.commit(
                self.run_id,
                primary.step,
                self.generation,
                entries,
                extra={**primary.extra, "replica_of": source.region},
                fenced=True,
            )
            replica.retain(
                self.run_id,
                self.keep_last,
                lineage=self.lineage,
                attempt=self.generation,
                on_skip=lambda step, reason: self.on_event(
                    "checkpoint_skipped", {"step": step, "region": replica.region, "reason": reason}
                ),
            )
        except (ManifestError, StoreError, FencedError, OSError) as exc:
            # A ManifestError: another rank's file read back from the source no longer
            # matches the signed manifest (changed in the store since its commit). It is not
            # copied and this checkpoint gets no replica, but the replica's store did nothing
            # wrong; training goes on (a restore passes over the source's copy). Any other:
            # stop trying this store for a while, as a hung one would hold up every upload.
            if not isinstance(exc, ManifestError):
                self._down_until[replica.region] = time.monotonic() + self.outage_s
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
                "bytes": sum(f.size for f in primary.files),
            },
        )

    def _copy_one(self, replica: CheckpointStore, step: int, name: str, data: bytes) -> FileEntry:
        entry = replica.put(self.run_id, step, name, data, self.generation)
        replica.verify_copy(self.run_id, step, name, data, self.generation)
        return entry
