"""Asynchronous checkpoint upload: snapshot in memory, upload in the background, commit last.

At most one upload is in flight; a new snapshot waits for the previous upload
(back-pressure rather than an unbounded queue of model copies). The manifest is
written only after every file of the checkpoint is in the store, so a kill
mid-upload leaves an uncommitted folder that restore ignores and retention
removes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from recovery.store import CheckpointStore


class CheckpointUploadError(RuntimeError):
    pass


class AsyncCheckpointer:
    def __init__(
        self,
        store: CheckpointStore,
        run_id: str,
        generation: int,
        keep_last: int,
        on_commit: Callable[[int, str], None] | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.generation = generation
        self.keep_last = keep_last
        self.on_commit = on_commit
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.committed_step: int | None = None
        self.committed_url: str | None = None

    def submit(self, step: int, files: dict[str, bytes], extra: dict[str, object]) -> None:
        """Hand over a snapshot (bytes already taken); returns once the upload has started."""
        self.wait()
        self._thread = threading.Thread(
            target=self._upload, args=(step, files, extra), name=f"ckpt-upload-{step}", daemon=True
        )
        self._thread.start()

    def wait(self) -> None:
        """Block until the upload in flight, if any, is committed; re-raise its failure."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise CheckpointUploadError(f"checkpoint upload to {self.store.url} failed: {err}") from err

    def _upload(self, step: int, files: dict[str, bytes], extra: dict[str, object]) -> None:
        try:
            entries = [self.store.put(self.run_id, step, name, data) for name, data in files.items()]
            self.store.commit(self.run_id, step, self.generation, entries, extra=extra)
            self.committed_step = step
            self.committed_url = self.store.checkpoint_url(self.run_id, step)
            if self.on_commit is not None:
                self.on_commit(step, self.committed_url)
            self.store.retain(self.run_id, self.keep_last)
        except BaseException as exc:
            self._error = exc
