"""Each trial's checkpoints as ordinary checkpoints of their own in the store.

A trial's checkpoint is committed like a training checkpoint (signed manifest, the
run's fence, fallback to the next region's store, a copy in the other regions) under
``<run_id>/trials/<trial_id>/checkpoints/``, its step the trial's iteration. The search's
snapshot (``experiment.tar``) then holds no weights: it names each trial's checkpoint
by a ``TrialRef`` (iteration, generation and a digest of its files), and is committed
only after every checkpoint it names. So a snapshot uploads only the trials that moved
since the last one, and a restore reads exactly the bytes the snapshot names: a
checkpoint of the same trial and iteration that another generation wrote (a zombie's)
has another digest and is never taken for it.

Retention follows the snapshots: a trial's checkpoints older than the oldest one a kept
snapshot names are deleted; the rest stay, whatever their count (``prune``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from orchestrator.runtime.checkpoint.commit import Committer, EventHook
from orchestrator.runtime.checkpoint.puts import UPLOAD_THREADS
from orchestrator.runtime.checkpoint.rank0_upload import Rank0Upload
from orchestrator.runtime.checkpoint.replicate import Replicator
from orchestrator.runtime.checkpoint.snapshot import snapshot_of
from recovery.manifest import Manifest, checkpoint_digest
from recovery.replication import store_error_text
from recovery.store import CheckpointStore, StoreError, part_of, sha256_hex

KIND = "hpo_trial"
_SHA = re.compile(r"[0-9a-f]{64}")
MAX_ATTEMPT = 1 << 16
REF_KEYS = frozenset({"iteration", "attempt", "digest"})


class TrialRefError(ValueError):
    """A reference that is not one a search writes; the message is one line."""


@dataclass(frozen=True)
class TrialRef:
    """Which checkpoint of a trial a snapshot stands on: the trial's ``iteration`` (its
    step in the store), the generation that committed it and the digest of its files
    (``checkpoint_digest`` of name -> sha256)."""

    iteration: int
    attempt: int
    digest: str

    def to_json(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "attempt": self.attempt, "digest": self.digest}

    @classmethod
    def from_json(cls, raw: Any, max_t: int) -> TrialRef:
        if not isinstance(raw, dict) or set(raw) != REF_KEYS:
            raise TrialRefError(f"is not an object of {', '.join(sorted(REF_KEYS))}")
        it, attempt, digest = raw["iteration"], raw["attempt"], raw["digest"]
        if isinstance(it, bool) or not isinstance(it, int) or not 1 <= it <= max_t:
            raise TrialRefError(f"iteration is not an integer in [1, {max_t}]")
        if isinstance(attempt, bool) or not isinstance(attempt, int) or not 0 <= attempt < MAX_ATTEMPT:
            raise TrialRefError(f"attempt is not an integer in [0, {MAX_ATTEMPT})")
        if not (isinstance(digest, str) and _SHA.fullmatch(digest)):
            raise TrialRefError("digest is not a sha256 in hex")
        return cls(it, attempt, digest)


def trial_run(run_id: str, trial_id: str) -> str:
    """The run id a trial's checkpoints are committed under."""
    return part_of(run_id, trial_id)


def files_digest(files: dict[str, bytes]) -> str:
    return checkpoint_digest({name: sha256_hex(data) for name, data in files.items()})


def manifest_digest(m: Manifest) -> str:
    return checkpoint_digest({f.name: f.sha256 for f in m.files})


def low_water(history: Iterable[dict[str, TrialRef]]) -> dict[str, int]:
    """Per trial, the oldest iteration any of ``history``'s snapshots names: what
    retention keeps from."""
    out: dict[str, int] = {}
    for refs in history:
        for trial_id, ref in refs.items():
            out[trial_id] = min(out.get(trial_id, ref.iteration), ref.iteration)
    return out


def doomed_folders(
    folders: dict[int, dict[int | None, bool]], keep_from: int, attempt: int
) -> list[tuple[int, int | None]]:
    """A trial's folders that retention deletes: below ``keep_from``, written by this
    attempt or an earlier one (a successor's are never ours to delete)."""
    doomed = [
        (step, gen)
        for step, gens in folders.items()
        if step < keep_from
        for gen in gens
        if gen is None or gen <= attempt
    ]
    return sorted(doomed, key=lambda f: (f[0], -1 if f[1] is None else f[1]))


class TrialStore:
    """Commits trials' checkpoints (``commit``, blocking: the search's uploader calls it
    from its own thread) and prunes them (``prune``)."""

    def __init__(
        self,
        stores: list[CheckpointStore],
        run_id: str,
        generation: int,
        outage_s: float,
        on_event: EventHook,
    ) -> None:
        self.stores, self.run_id, self.generation = stores, run_id, generation
        self.outage_s, self.on_event = outage_s, on_event
        self._pool = ThreadPoolExecutor(max_workers=UPLOAD_THREADS, thread_name_prefix="trial-put")
        self._parts: dict[str, tuple[Committer, Replicator]] = {}
        self.current = 0  # which of ``stores`` commits go to now
        # Checkpoints committed by this attempt, and their bytes (in the store committed to).
        self.uploads, self.uploaded_bytes = 0, 0
        # trial_id -> the bytes of its checkpoint in ``committed``.
        self.sizes: dict[str, int] = {}
        # trial_id -> (its ref in ``committed``, where its files were read from: the caller's
        # word, a scratch folder, or None for the restore's), set as one (read by another thread).
        self.sources: dict[str, tuple[TrialRef, str | None]] = {}
        # trial_id -> the iteration below which ``prune`` has deleted its checkpoints everywhere.
        self._pruned: dict[str, int] = {}
        # trial_id -> the newest checkpoint committed by this attempt, or one the restore read
        # from the primary store (``adopt``): not committed again.
        self.committed: dict[str, TrialRef] = {}

    def _of(self, trial_id: str) -> tuple[Committer, Replicator]:
        if trial_id not in self._parts:
            run = trial_run(self.run_id, trial_id)
            # Retention is prune's (it follows the snapshots); the counts here keep everything.
            keep = MAX_ATTEMPT
            committer = Committer(
                self.stores,
                run,
                self.generation,
                keep,
                Rank0Upload(run, self._pool, None, self.generation),
                self.outage_s,
                self.on_event,
            )
            replicator = Replicator(self.stores, run, self.generation, keep, self._pool, self.outage_s, self.on_event)
            self._parts[trial_id] = (committer, replicator)
        return self._parts[trial_id]

    def commit(self, trial_id: str, iteration: int, files: dict[str, bytes], source: str | None = None) -> TrialRef:
        """The trial's checkpoint committed (and copied to the other regions), unless this
        attempt committed these very files already. Raises FencedError, or StoreError
        once every store has failed for its outage."""
        ref = TrialRef(iteration, self.generation, files_digest(files))
        held = self.committed.get(trial_id)
        if held is not None and (held.iteration, held.digest) == (ref.iteration, ref.digest):
            self.sources[trial_id] = (held, source)
            return held  # these very files, committed by this attempt or adopted from the restore
        committer, replicator = self._of(trial_id)
        snap = snapshot_of(iteration, files, {"kind": KIND, "trial_id": trial_id, "iteration": iteration})
        # Where the last trial's commit went (a store that failed for its outage is passed
        # over once for all trials, not once per trial).
        committer.current = self.current
        manifest = committer.commit(snap, lambda: False)
        self.current = committer.current
        assert manifest is not None  # only a newer snapshot waiting gives one up
        self.uploads += 1
        self.uploaded_bytes += sum(f.size for f in manifest.files)
        self.sizes[trial_id] = sum(f.size for f in manifest.files)
        self.on_event(
            "trial_checkpointed",
            {
                "trial_id": trial_id,
                "iteration": iteration,
                "region": committer.store.region,
                "bytes": sum(f.size for f in manifest.files),
                "commit_s": round(time.monotonic() - snap.taken_at, 4),
            },
        )
        replicator.replicate(committer.store, manifest, files)
        self.committed[trial_id] = ref
        self.sources[trial_id] = (ref, source)
        return ref

    def adopt(self, refs: dict[str, TrialRef], sizes: dict[str, int] | None = None) -> None:
        """Checkpoints an earlier attempt committed that the primary store holds whole (the
        restore read them there; ``sizes``: their bytes): named again as they are until
        their trial moves, not uploaded again under this attempt's generation."""
        for trial_id, ref in refs.items():
            if trial_id not in self.committed:
                self.committed[trial_id] = ref
                self.sources[trial_id] = (ref, None)
                self.sizes[trial_id] = (sizes or {}).get(trial_id, 0)

    def prune(self, keep_from: dict[str, int]) -> None:
        """Delete each trial's checkpoints older than ``keep_from[trial_id]`` in every
        store; a store that fails costs only space (the next snapshot tries again). A
        trial whose mark has not risen since it was last pruned everywhere is not listed
        again (iterations start at 1: nothing is below it)."""
        todo = {t: first for t, first in keep_from.items() if first > self._pruned.get(t, 1)}
        whole = True
        for store in self.stores:
            for trial_id, first in sorted(todo.items()):
                run = trial_run(self.run_id, trial_id)
                try:
                    for step, gen in doomed_folders(store.folders(run), first, self.generation):
                        store.delete_folder(run, step, gen)
                except StoreError as exc:
                    self.on_event("retention_failed", {"region": store.region, "error": str(exc)[:300]})
                    whole = False
                    break
        if whole:
            self._pruned.update(todo)


def fetch_trial(
    stores: list[CheckpointStore], run_id: str, trial_id: str, ref: TrialRef
) -> tuple[dict[str, bytes] | None, str]:
    """The verified files of the checkpoint ``ref`` names, from the first of ``stores``
    that holds it; (None, why not, per store) when none does."""
    files, why, _ = fetch_trial_from(stores, run_id, trial_id, ref)
    return files, why


def fetch_trial_from(
    stores: list[CheckpointStore], run_id: str, trial_id: str, ref: TrialRef
) -> tuple[dict[str, bytes] | None, str, CheckpointStore | None]:
    """``fetch_trial``, and the store it read the files from."""
    run = trial_run(run_id, trial_id)
    why: list[str] = []
    for store in stores:
        try:
            m, verdict, files = store.load(run, ref.iteration, keep=lambda _: True, generation=ref.attempt)
        except Exception as exc:  # any client error: the next store may hold it
            why.append(store_error_text(store, exc))
            continue
        if m is None or not verdict.ok:
            why.append(f"{store.region}: {verdict.reason}")
        elif m.extra.get("kind") != KIND or m.extra.get("trial_id") != trial_id or manifest_digest(m) != ref.digest:
            why.append(f"{store.region}: its checkpoint there is not the one the snapshot names")
        else:
            return files, "", store
    return None, "; ".join(why)[:500] or "no store to read", None
