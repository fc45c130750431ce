"""Replication of committed checkpoints to the other candidate regions' stores.

A replica is committed the same way as the original: files first, each verified
after the copy, then the manifest (signed with the run's key by the target store). A
source that does not verify, or whose manifest is not signed with the run's key, is
never copied.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from recovery.fencing import Admits, Lineage
from recovery.manifest import Manifest, ManifestError
from recovery.store import CheckpointStore, Keep, StoreError, part_of, step_dir_name

# The key of a checkpoint's extra that names the checkpoints of its parts, each of which
# must be in a store before the checkpoint that names it (a search snapshot's trials).
CHECKPOINTS = "checkpoints"
_PART = re.compile(r"trial_\d{5}")


@dataclass(frozen=True)
class Replicated:
    step: int
    source: str  # region
    target: str  # region
    lag_s: float  # replica commit time minus the original's commit time
    copy_s: float
    bytes: int


class ReplicationError(Exception):
    pass


def replicate(src: CheckpointStore, dst: CheckpointStore, manifest: Manifest) -> Replicated | None:
    """Copy one committed checkpoint, after the checkpoints of its parts it names (a
    search snapshot's trials, see ``named_parts``); None when the target already holds a
    valid copy."""
    trust = src.trusts(manifest)
    if not trust.ok:
        raise ReplicationError(f"source {src.url} step {manifest.step}: {trust.reason}")
    for part_run, step, attempt in named_parts(manifest):
        part, verdict = src.trusted_manifest(part_run, step, step_dir_name(step, attempt))
        if part is None or not verdict.ok:
            raise ReplicationError(
                f"source {src.url} step {manifest.step}: a part it names is not there: {verdict.reason}"
            )
        _copy(src, dst, part)
    return _copy(src, dst, manifest)


def named_parts(manifest: Manifest) -> list[tuple[str, int, int]]:
    """The checkpoints of its parts a checkpoint names in its (signed) extra under
    CHECKPOINTS as part -> {"iteration", "attempt", ...}: (their run id, step, attempt).
    ReplicationError for a shape a snapshot never writes."""
    named = manifest.extra.get(CHECKPOINTS)
    if named is None:
        return []
    if not isinstance(named, dict):
        raise ReplicationError(f"step {manifest.step}: its {CHECKPOINTS} is not an object")
    out: list[tuple[str, int, int]] = []
    for name, ref in sorted(named.items()):
        step = ref.get("iteration") if isinstance(ref, dict) else None
        attempt = ref.get("attempt") if isinstance(ref, dict) else None
        if not (_PART.fullmatch(name) and _count(step) and _count(attempt)):
            raise ReplicationError(f"step {manifest.step}: its {CHECKPOINTS} names a part it cannot hold")
        out.append((part_of(manifest.run_id, name), step, attempt))
    return out


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62


def _copy(src: CheckpointStore, dst: CheckpointStore, manifest: Manifest) -> Replicated | None:
    run_id, step = manifest.run_id, manifest.step
    # Held already: the same attempt's commit, verified (not a stranger's, nor a zombie's
    # commit of the same step number, which another attempt wrote).
    folder = step_dir_name(step, manifest.attempt)
    held, _ = dst.trusted_manifest(run_id, step, folder)
    if (
        held is not None
        and held.attempt == manifest.attempt
        and dst.load(run_id, step, generation=manifest.attempt)[1].ok
    ):
        return None
    t0 = time.time()
    total = 0
    for entry in manifest.files:
        try:
            data = src.read(manifest, entry.name)
        except ManifestError as exc:
            raise ReplicationError(f"source {src.url} step {step} does not verify: {exc}") from None
        dst.put(run_id, step, entry.name, data, manifest.attempt)
        try:
            dst.verify_copy(run_id, step, entry.name, data, manifest.attempt)
        except StoreError as exc:
            raise ReplicationError(str(exc)) from None
        total += len(data)
    copied = dst.commit(
        run_id,
        step,
        manifest.attempt,
        manifest.files,
        extra={**manifest.extra, "replica_of": src.region},
    )
    return Replicated(
        step=step,
        source=src.region,
        target=dst.region,
        lag_s=copied.committed_at - manifest.committed_at,
        copy_s=time.time() - t0,
        bytes=total,
    )


@dataclass(frozen=True)
class Restorable:
    """The checkpoint a restore takes: where, its manifest, and the verified bytes kept."""

    store: CheckpointStore
    manifest: Manifest
    files: dict[str, bytes]


def sync_newest(
    run_id: str,
    stores: list[CheckpointStore],
    on_skip: Callable[[CheckpointStore, int, str], None],
    lineage: Admits | None = None,
    exclude: Collection[tuple[str, int]] = (),
    on_store_error: Callable[[CheckpointStore, str], None] | None = None,
) -> tuple[CheckpointStore, Manifest] | None:
    """The newest checkpoint that verifies (and is on the lineage) in any store;
    the first store wins ties. See ``load_newest``."""
    best = load_newest(run_id, stores, on_skip, lineage, exclude, on_store_error)
    return None if best is None else (best.store, best.manifest)


def load_newest(
    run_id: str,
    stores: list[CheckpointStore],
    on_skip: Callable[[CheckpointStore, int, str], None],
    lineage: Admits | None = None,
    exclude: Collection[tuple[str, int]] = (),
    on_store_error: Callable[[CheckpointStore, str], None] | None = None,
    keep: Keep | None = None,
    before_read: Callable[[CheckpointStore, Manifest], None] | None = None,
    sized: Keep | None = None,
) -> Restorable | None:
    """The newest checkpoint that verifies (and is on the lineage) in any store, the
    first store winning ties, with the verified bytes of the files ``keep`` says yes to.

    Candidates are tried newest first across every store, so only the winner's files
    are read (and any newer ones that fail), once each. A store that raises anything
    (unreachable, a timeout, a folder where a file should be) is passed over from
    there on and reported to ``on_store_error``; so are the (region, step) pairs in
    ``exclude``; a candidate that fails is reported to ``on_skip``. ``before_read``:
    told of a candidate whose manifest is trusted, before its files are read;
    ``sized``: files only found with their size, for their reader to verify (see
    ``CheckpointStore.load``)."""
    listed: list[tuple[int, int, CheckpointStore]] = []
    failed: set[int] = set()

    def store_failed(i: int, exc: BaseException) -> None:
        failed.add(i)
        if on_store_error is not None:
            on_store_error(stores[i], store_error_text(stores[i], exc))

    for i, store in enumerate(stores):
        bad = frozenset(step for region, step in exclude if region == store.region)
        try:
            listed += [(step, i, store) for step in store.candidates(run_id, exclude=bad)]
        except Exception as exc:  # any client error: this store tells nothing, the others still count
            store_failed(i, exc)
    for step, i, store in sorted(listed, key=lambda c: (-c[0], c[1])):
        if i in failed:
            continue
        try:
            hook = None if before_read is None else (lambda m, st=store: before_read(st, m))
            m, verdict, files = store.load(run_id, step, lineage, keep, hook, sized)
        except Exception as exc:  # as above: from here on this store is passed over
            store_failed(i, exc)
            continue
        if m is not None and verdict.ok:
            return Restorable(store, m, files)
        on_skip(store, step, verdict.reason)
    return None


def store_error_text(store: CheckpointStore, exc: BaseException) -> str:
    """One line for a store's error: a StoreError already names the store, others get its name."""
    if isinstance(exc, StoreError):
        return str(exc).splitlines()[0] if str(exc) else "StoreError"
    return str(store._error("restore selection", exc))


class Replicator:
    """Background copier: follows the primary store and copies each new commit to the others."""

    def __init__(
        self,
        run_id: str,
        keep_last: int,
        on_replicated: Callable[[Replicated], None],
        on_error: Callable[[str], None],
        interval_s: float = 2.0,
        lineage: Callable[[], Lineage] | None = None,
    ) -> None:
        self.lineage = lineage
        self.run_id = run_id
        self.keep_last = keep_last
        self.on_replicated = on_replicated
        self.on_error = on_error
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._primary: CheckpointStore | None = None
        self._targets: list[CheckpointStore] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors: set[str] = set()

    def follow(self, primary: CheckpointStore, targets: list[CheckpointStore]) -> None:
        with self._lock:
            self._primary = primary
            self._targets = [t for t in targets if t.url != primary.url]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="replicator", daemon=True)
        self._thread.start()

    def stop(self, drain: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if drain:
            self.tick()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception as exc:  # whatever a store holds must not end replication for the run
                self._report(f"replication: {type(exc).__name__}: {str(exc)[:300]}")

    def tick(self) -> list[Replicated]:
        with self._lock:
            primary, targets = self._primary, list(self._targets)
        if primary is None:
            return []
        done: list[Replicated] = []
        try:
            newest = self._newest_trusted(primary)
        except (StoreError, ManifestError) as exc:
            self._report(str(exc))
            return done
        lineage = self.lineage() if self.lineage is not None else None
        for target in targets:
            try:
                have = set(target.committed_steps(self.run_id))
            except StoreError as exc:
                self._report(f"replication to {target.region} ({target.url}): {exc}")
                continue
            # Newest first, and only until one is there: an older checkpoint is
            # superseded once a newer one is replicated, and copying every one would
            # take CPU from training for nothing. A bad newest falls back to older.
            for m in reversed(newest):
                step = m.step
                # A step the target holds counts only under a manifest signed with the run's
                # key: a planted one must not stop the run's own from being copied over it.
                try:
                    if step in have and self._holds(target, step, lineage):
                        break
                    if lineage is not None and not lineage.allows(m.attempt, m.step):
                        why = lineage.why_not(m.attempt, m.step)
                        self._report(f"not replicating step {step} of {primary.region}: {why}")
                        continue
                    r = replicate(primary, target, m)
                except (StoreError, ReplicationError, ManifestError, OSError) as exc:
                    self._report(f"replication of step {step} to {target.region}: {exc}")
                    continue
                if r is not None:
                    done.append(r)
                    self.on_replicated(r)
                    try:
                        target.retain(
                            self.run_id,
                            self.keep_last,
                            lineage=lineage,
                            on_skip=lambda s, why, t=target: self._report(f"{t.region} step {s}: {why}"),
                        )
                    except StoreError as exc:
                        self._report(f"retention in {target.region} ({target.url}): {exc}")
                break
        return done

    def _holds(self, target: CheckpointStore, step: int, lineage: Lineage | None) -> bool:
        """Whether ``target``'s copy of ``step`` is the run's own and on the lineage: a
        zombie's same-numbered commit (signed with the run's key, by an attempt the
        lineage has fenced past it) must not pass for the lineage's, or no restore from
        ``target`` would ever find this step."""
        manifest, verdict = target.trusted_manifest(self.run_id, step)
        if manifest is None or not verdict.ok:
            return False
        return lineage is None or lineage.allows(manifest.attempt, manifest.step)

    def _newest_trusted(self, primary: CheckpointStore) -> list[Manifest]:
        """The manifests of the newest ``keep_last`` steps of ``primary`` signed with the
        run's key, oldest first (read once per tick): checkpoints planted above them
        (unsigned, or another run's) must not crowd the run's own out of the window."""
        trusted: list[Manifest] = []
        for step in reversed(primary.committed_steps(self.run_id)):
            if len(trusted) == self.keep_last:
                break
            manifest, verdict = primary.trusted_manifest(self.run_id, step)
            if manifest is not None and verdict.ok:
                trusted.append(manifest)
            elif manifest is not None:
                self._report(f"not replicating step {step} of {primary.region}: {verdict.reason}")
        return trusted[::-1]

    def _report(self, message: str) -> None:
        # The same persistent error once, not every half second.
        if message not in self._errors:
            self._errors.add(message)
            self.on_error(message)
