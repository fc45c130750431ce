"""The background uploader: snapshot in memory, upload in a thread, commit last.

At most one upload in flight. A snapshot taken while one is in flight waits in a queue
of one; a newer snapshot replaces it (the newest is the one worth having), so training
never blocks on storage and memory stays bounded. After each commit: the copy on
scratch, the copies in the other regions, retention.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from orchestrator.runtime.checkpoint.commit import Committer, EventHook
from orchestrator.runtime.checkpoint.puts import UPLOAD_THREADS
from orchestrator.runtime.checkpoint.rank0_upload import Rank0Upload
from orchestrator.runtime.checkpoint.replicate import Replicator
from orchestrator.runtime.checkpoint.scratch import LocalCopy, ScratchKeeper
from orchestrator.runtime.checkpoint.share_plan import ShareReport
from orchestrator.runtime.checkpoint.snapshot import Snapshot, snapshot_of
from recovery.fencing import Admits, FencedError
from recovery.store import CheckpointStore


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
        self.replicate = replicate
        self.run_id = run_id
        self.generation = generation
        self.outage_s = outage_s
        self.on_event = on_event or (lambda type_, fields: None)
        # Threads start on the first put; shared by the puts and the replicas' copies.
        files = ThreadPoolExecutor(max_workers=UPLOAD_THREADS, thread_name_prefix="ckpt-put")
        self.committer = Committer(
            stores,
            run_id,
            generation,
            keep_last,
            Rank0Upload(run_id, files, on_stage, generation),
            outage_s=outage_s,
            on_event=self.on_event,
            lineage=lineage,
        )
        self.replicator = Replicator(stores, run_id, generation, keep_last, files, outage_s, self.on_event, lineage)
        self.local = LocalCopy(scratch_dir) if scratch_dir else None
        self._scratch = ScratchKeeper(self.local.root, self.on_event) if self.local is not None else None
        self._cond = threading.Condition()
        self._queued: Snapshot | None = None
        self._busy = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.committed_step: int | None = None
        self.committed_url: str | None = None

    @property
    def stores(self) -> list[CheckpointStore]:
        return self.committer.stores

    @property
    def store(self) -> CheckpointStore:
        """The store uploads go to now (the primary until a fallback)."""
        return self.committer.store

    @property
    def store_index(self) -> int:
        """Which of ``stores`` uploads go to now: where the other ranks must put their
        files of a sharded checkpoint (rank 0 tells them at each snapshot)."""
        return self.committer.current

    @property
    def fenced(self) -> bool:
        return self.committer.fenced

    @property
    def limit_s(self) -> float:
        """How long one commit may take: every store failing for its outage, and a margin."""
        return self.outage_s * (len(self.stores) + 1) + 30

    @property
    def last_share(self) -> ShareReport | None:
        return self.committer.last_share

    def submit(
        self,
        step: int,
        files: dict[str, bytes],
        extra: dict[str, object],
        shares: Mapping[str, int] | None = None,
        digests: Mapping[str, str] | None = None,
        remote: Mapping[str, tuple[int, int, str]] | None = None,
        store_index: int | None = None,
    ) -> None:
        """Hand over a snapshot (bytes already taken). Never blocks on storage.
        ``shares``: files other ranks put (name -> rank), with ``digests``, the sha256
        of this process's bytes of each (see ``share_plan``); ``remote``: files only other
        ranks hold, name -> (rank, size, sha256) (a sharded checkpoint), put into the
        store ``store_index`` names (default: the current one, ``store_index``)."""
        if self.fenced:
            raise FencedError(f"attempt {self.generation} is fenced: a newer generation has taken over")
        index = self.store_index if store_index is None else store_index
        snapshot = snapshot_of(step, files, extra, shares, digests, remote, index)
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
        limit = timeout_s if timeout_s is not None else self.limit_s
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

    def _newer_waiting(self) -> bool:
        with self._cond:
            return self._queued is not None

    def _upload(self, snap: Snapshot) -> None:
        primary = self.committer.commit(snap, self._newer_waiting)
        if primary is None:
            return  # superseded
        store = self.committer.store
        self.committed_step = snap.step
        self.committed_url = store.checkpoint_url(self.run_id, snap.step)
        # From the hand-over to the signed manifest: what benchmarks/sharded.py compares.
        self.on_event(
            "checkpoint_committed",
            {
                "step": snap.step,
                "region": store.region,
                "commit_s": round(time.monotonic() - snap.taken_at, 4),
                "bytes": sum(f.size for f in primary.files),
                "files": len(primary.files),
            },
        )
        if self._scratch is not None and self.local is not None:
            local = self.local
            self._scratch.keep(primary.step, lambda: local.keep(primary, snap.files))
        # With a newer snapshot waiting, that one is the one worth copying.
        if self.replicate and not self._newer_waiting():
            self.replicator.replicate(store, primary, snap.files)
        self.committer.retain(store)
