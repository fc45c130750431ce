"""Rank r > 0's part of an upload: its share put, best effort (see ``share_plan``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from orchestrator.runtime.checkpoint.puts import UPLOAD_THREADS, put_order
from recovery.fencing import FenceRejected
from recovery.store import CheckpointStore, StoreError, read_fence, sha256_hex


class ShareUpload:
    """Rank r > 0's part of a shared upload: put the files rank 0 assigned to this rank
    into the primary store, best effort, in the background.

    A file is put only when this rank's bytes have the sha256 rank 0 gave for it (so
    every write here is of rank 0's bytes, whenever it lands), and not at all once the
    store's fence names a newer generation. Nothing is retried and nothing raised: rank
    0 checks every file before it commits and puts what is missing itself. At most one
    share in flight and one waiting; a newer one replaces the waiting one.

    A rank's own files (``submit(..., own=True)``: a sharded checkpoint's shard, a train
    function's files only it holds) come with the sha256 this rank took of these very
    bytes: not hashed again, put, and withdrawn if the store says it received other
    bytes (``CheckpointStore.confirm_put``); rank 0, which has no copy, commits them once
    they are there at their size."""

    def __init__(self, store: CheckpointStore, run_id: str, generation: int) -> None:
        self.store = store
        self.run_id = run_id
        self.generation = generation
        self._cond = threading.Condition()
        self._queued: tuple[int, dict[str, bytes], dict[str, str], bool] | None = None
        self._busy = False
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.fenced = False
        # What happened to each file of the last share: "put", "other_bytes", "failed",
        # "fenced", "withdrawn".
        self.last: dict[str, str] = {}

    def submit(self, step: int, files: dict[str, bytes], digests: Mapping[str, str], own: bool = False) -> None:
        """Hand over this rank's share (its own bytes) and rank 0's sha256 of each file;
        ``own``: files only this rank holds, ``digests`` taken of these bytes here."""
        if not files or self.fenced:
            return
        with self._cond:
            self._queued = (step, files, dict(digests), own)
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
                (step, files, digests, own), self._queued = self._queued, None
                self._busy = True
            try:
                self.last = self._put_share(step, files, digests, own)
            except Exception:  # best effort: rank 0 puts whatever is missing
                pass
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _put_share(self, step: int, files: dict[str, bytes], digests: dict[str, str], own: bool) -> dict[str, str]:
        try:
            fence = read_fence(self.store, self.run_id)
        except StoreError:
            return dict.fromkeys(files, "failed")  # an unseen fence may hide a newer generation
        except FenceRejected:
            fence = None  # not the controller's: it neither stops nor allows anything
        if fence is not None and fence.generation > self.generation:
            self.fenced = True
            return dict.fromkeys(files, "fenced")
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=UPLOAD_THREADS, thread_name_prefix="ckpt-share-put")

        def put(name: str) -> str:
            data, sha = files[name], digests.get(name)
            if sha is None or (not own and sha256_hex(data) != sha):
                return "other_bytes"
            try:
                self.store.put(self.run_id, step, name, data, self.generation, sha256=sha)
                if own and not self.store.confirm_put(self.run_id, step, name, data, self.generation):
                    return "withdrawn"
            except Exception:  # any store or client error: rank 0 puts it, or (own) does not commit
                return "failed"
            return "put"

        names = put_order(files, files)
        return dict(zip(names, self._pool.map(put, names), strict=True))
