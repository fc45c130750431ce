"""A search's snapshots uploaded in the background: trials' checkpoints first, then the snapshot.

Tune's controller thread hands over a ``SnapshotJob`` (the trials' checkpoint files it
read from scratch, and how to pack the snapshot once their references are known) and
goes on. One thread commits the job: each trial checkpoint that changed since this
attempt last committed it (``TrialStore.commit``), then the snapshot naming them all
(through the run's ``AsyncCheckpointer``: signed, fenced, replicated, retained), then
prunes trial checkpoints no kept snapshot names. A snapshot is never committed before
a checkpoint it names. At most one job waits; a newer one replaces it (journaled as
``upload_superseded``), as training's uploads do.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.runtime.checkpoint.background import AsyncCheckpointer, CheckpointUploadError
from orchestrator.runtime.checkpoint.commit import EventHook
from orchestrator.runtime.search.snapshot import ARCHIVE
from orchestrator.runtime.search.trial_store import TrialRef, TrialStore, low_water
from recovery.fencing import FencedError
from recovery.replication import CHECKPOINTS


@dataclass
class SnapshotJob:
    step: int
    # trial_id -> (the iteration its checkpoint stands at, its files)
    trials: dict[str, tuple[int, dict[str, bytes]]]
    # The snapshot's archive, given the references of its trials' checkpoints.
    pack: Callable[[dict[str, TrialRef]], bytes]
    extra: dict[str, object]
    # Trials' checkpoints committed before (they have not moved since): named as they are.
    named: dict[str, TrialRef] = field(default_factory=dict)
    # Trials that have ended: their checkpoint is their final weights, kept, not a point
    # to resume from.
    finished: frozenset[str] = frozenset()
    # trial_id -> the scratch folder ``trials``' files were read from (absent or None: the
    # restore's): how the driver knows a trial has not moved since its commit.
    sources: dict[str, str | None] = field(default_factory=dict)


class SearchUploader:
    def __init__(
        self,
        checkpointer: AsyncCheckpointer,
        trials: TrialStore,
        keep_last: int,
        on_event: EventHook,
        restored: dict[str, TrialRef] | None = None,
    ) -> None:
        self.checkpointer, self.trials, self.on_event = checkpointer, trials, on_event
        # The references of the snapshots retention keeps (the restored one counts until
        # keep_last newer ones are committed): what trial retention keeps from.
        self.history: deque[dict[str, TrialRef]] = deque(maxlen=max(1, keep_last))
        if restored:
            self.history.append(dict(restored))
        self._cond = threading.Condition()
        self._queued: SnapshotJob | None = None
        self._busy = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._limit_s = 0.0
        self._fenced = False

    @property
    def fenced(self) -> bool:
        """A newer generation has fenced this attempt: nothing more is committed."""
        return self._fenced or self.checkpointer.fenced

    @property
    def committed_url(self) -> str | None:
        return self.checkpointer.committed_url

    def submit(self, job: SnapshotJob) -> None:
        """Hand over a job; never blocks on storage. FencedError once this attempt is fenced."""
        if self.fenced:
            raise FencedError(f"attempt {self.trials.generation} is fenced: a newer generation has taken over")
        with self._cond:
            if self._queued is not None:
                self.on_event("upload_superseded", {"step": self._queued.step, "superseded_by": job.step})
            self._queued = job
            # As the checkpointer's own wait, once for the snapshot and once per trial.
            self._limit_s = max(self._limit_s, self.checkpointer.limit_s * (1 + len(job.trials)))
            if self._thread is None:
                self._thread = threading.Thread(target=self._worker, name="search-upload", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until every job handed over is committed; re-raise a failure."""
        limit = self._limit_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        with self._cond:
            while self._queued is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CheckpointUploadError(f"search snapshot not committed after {limit:.0f}s")
                self._cond.wait(timeout=min(left, 0.5))
            if self._error is not None:
                err, self._error = self._error, None
                if isinstance(err, FencedError):
                    raise err
                raise CheckpointUploadError(f"search snapshot upload failed: {err}") from err

    def _worker(self) -> None:
        while True:
            with self._cond:
                while self._queued is None:
                    self._cond.wait()
                job, self._queued = self._queued, None
                self._busy = True
            try:
                self._commit(job)
            except BaseException as exc:
                self._error = exc
                self._fenced = self._fenced or isinstance(exc, FencedError)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _commit(self, job: SnapshotJob) -> None:
        refs = dict(job.named)
        count, resume, final = 0, 0, 0
        for trial_id, (iteration, files) in sorted(job.trials.items()):
            before = (self.trials.uploads, self.trials.uploaded_bytes)
            refs[trial_id] = self.trials.commit(trial_id, iteration, files, job.sources.get(trial_id))
            if self.trials.uploads > before[0]:
                count += 1
                size = self.trials.uploaded_bytes - before[1]
                final, resume = (final + size, resume) if trial_id in job.finished else (final, resume + size)
        # The manifest names them too: what the controller's replicator copies with it.
        named = {t: ref.to_json() for t, ref in sorted(refs.items())}
        archive = job.pack(refs)
        self.checkpointer.submit(job.step, {ARCHIVE: archive}, extra={**job.extra, CHECKPOINTS: named})
        self.checkpointer.wait()
        self.history.append(refs)
        self.trials.prune(low_water(self.history))
        # What this snapshot put into the store (``bytes_final``: finished trials' final
        # weights, kept), and what one holding its trials' weights (every trial that may
        # still run) would have: benchmarks/search_uploads.py.
        held = sum(len(d) for t, (_, files) in job.trials.items() if t not in job.finished for d in files.values())
        held += sum(self.trials.sizes.get(t, 0) for t in job.named if t not in job.finished)
        self.on_event(
            "search_snapshot",
            {
                "step": job.step,
                "trials_named": len(refs),
                "trials_uploaded": count,
                "bytes_uploaded": len(archive) + resume + final,
                "bytes_final": final,
                "bytes_if_held": len(archive) + held,
            },
        )
