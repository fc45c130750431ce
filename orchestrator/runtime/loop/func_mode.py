"""job.train_func: an unchanged Ray Train function as the workload.

The user's function runs on every Ray Train worker as it would under a plain
TorchTrainer, with ``job.params`` as its ``config``. Its calls to
``ray.train.report(metrics, checkpoint=...)`` and ``ray.train.get_checkpoint()``
go through the orchestrator's stores instead of Ray's storage path:

- every checkpoint a report carries is committed through ``AsyncCheckpointer`` (files,
  the manifest last with sha256, replication, fencing, fallback stores) as step N, the
  report's: every report is one step of the run's clock, N the reports made so far (a
  restore starts the count at its checkpoint's). When several ranks pass one, their
  folders make one checkpoint, as Ray merges them, without any rank holding another's
  bytes: the ranks exchange only each file's name, size and sha256; each rank puts the
  files it is the lowest rank to hold (``layout_of``); rank 0 commits the one signed
  manifest once every file is in the store with the size and sha256 its rank reported (a
  rank that dies first: no commit);
- before the function starts, rank 0 picks the newest checkpoint that verifies on
  the controller's lineage exactly as the built-in loop does, and every rank
  downloads the whole folder (each file verified again, a bounded batch at a time,
  straight to disk) into a temporary folder that get_checkpoint() returns: DCP's load
  then reads the shards it needs, at this world size or another;
- each report's metrics go to the controller as progress, with the reports made so
  far; the last ones (rank 0's) are the result's metrics, with ``checkpoint_sha256``
  naming the final checkpoint. The progress has a total (and so an ETA) only when the
  function's config says how many reports it will make (``declared_reports``):
  ``job.steps`` is the built-in loop's count, not the function's;
- after a preemption notice, the next report that carries a checkpoint commits it
  synchronously and the function is stopped on every rank (the driver then exits
  EXIT_PREEMPTED); chaos ``during: checkpoint_upload`` and ``during: restore`` meet
  the injector as in the built-in loop, and so do ``at_step`` faults, at the report whose
  step it is (or, with ``job.clock``, the first whose metric reaches it);
- what makes a function exact (every rank seeded, its RNG states saved with each
  checkpoint and put back on resume, its model's digest) is ``func_exact`` and
  ``func_weights``.

The hook. Ray Train v2 sends every public train-function call (report,
get_checkpoint, get_context, get_dataset_shard, the collectives) through one
process-wide object, its ``TrainFnUtils``
(ray/train/v2/_internal/execution/train_fn_utils.py, whose docstring invites
patching it; Ray's own local mode swaps it the same way). ``routed_through`` swaps
in ``StoreFnUtils`` for the duration of the function and puts Ray's back after. So
every spelling reaches us (``ray.train.report``, ``from ray import train``, ``from
ray.train import report`` bound at the top of a module imported before us), and
nothing in Ray's namespaces is rebound. Ray's ``checkpoint_upload_fn`` does not fit:
it is an argument of the user's call (their code would change), its result must be
a checkpoint under Ray's storage path (Ray checks), and get_checkpoint stays Ray's.
Ray still sees every report's metrics, never a checkpoint: its report stays the
barrier Ray documents.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from ray.train.v2._internal.constants import is_v2_enabled
from ray.train.v2._internal.execution import context as ray_context
from ray.train.v2._internal.execution import train_fn_utils as ray_fn_utils
from ray.train.v2.api.report_config import CheckpointConsistencyMode, CheckpointUploadMode

from orchestrator.runtime.checkpoint.scratch import RankCopy, ScratchKeeper, node_scratch, write_files
from orchestrator.runtime.group.node_label import my_node
from orchestrator.runtime.loop import func_exact
from orchestrator.runtime.loop.func_weights import folder_weights_sha256
from orchestrator.runtime.loop.train_loop import rng_state, set_rng_state
from orchestrator.runtime.loop.worker import PROGRESS_EVERY_S, Stopped, UserCodeError, WorkerAttempt, run_worker
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.spec import RuntimeSpec
from orchestrator.wire.triggers import crossed, due_at_step
from orchestrator.workloads import declared_reports
from recovery.manifest import MANIFEST_NAME, ManifestError, check_member_name, checkpoint_digest
from recovery.store import sha256_hex


class Stop(Stopped):
    """Raised out of report() on every rank once the preemption checkpoint is committed."""


# --- pure pieces ----------------------------------------------------------------------


@dataclass(frozen=True)
class ReportPlan:
    """What one report() does, the same on every rank."""

    step: int  # the run's reports after this one: the function's clock (this checkpoint's step if it carries one)
    commit: bool  # some rank passed a checkpoint
    wait: bool  # commit it before report() returns
    stop: bool  # then stop the function (preemption)


def plan_report(count: int, any_checkpoint: bool, preempting: bool, async_upload: bool) -> ReportPlan:
    """``count``: reports made so far in the run (after a restore: the restored checkpoint's
    step). Every report is one step of the function's clock; one that carries a
    checkpoint commits it as that step. A preemption waits for the next report with a
    checkpoint, commits it, and stops."""
    return ReportPlan(
        step=count + 1,
        commit=any_checkpoint,
        wait=any_checkpoint and (preempting or not async_upload),
        stop=any_checkpoint and preempting,
    )


def read_checkpoint_dir(root: str) -> dict[str, bytes]:
    """A checkpoint folder's files by relative POSIX path, subfolders included."""
    base = Path(root)
    files: dict[str, bytes] = {}
    for path in sorted(base.rglob("*")):
        if not path.is_file():
            continue
        name = path.relative_to(base).as_posix()
        if func_exact.is_ours(name):
            raise UserCodeError(
                f"a reported checkpoint holds {name!r}; {func_exact.RNG_DIR}/ is where the orchestrator keeps "
                "each rank's RNG states: rename that folder"
            )
        try:
            check_member_name(name)
        except ManifestError:
            # The top-level MANIFEST.json is our commit record; anything else check_member_name
            # refuses cannot come out of a folder walk.
            raise UserCodeError(
                f"a reported checkpoint holds {name!r}; {MANIFEST_NAME} at its top is the orchestrator's "
                "commit record: rename that file"
            ) from None
        files[name] = path.read_bytes()
    return files


# What one rank holds of a reported checkpoint: relative name -> (size, sha256).
Catalog = dict[str, tuple[int, str]]


def catalog_of(files: Mapping[str, bytes]) -> Catalog:
    return {name: (len(data), sha256_hex(data)) for name, data in files.items()}


@dataclass(frozen=True)
class Layout:
    """One report's checkpoint across the ranks: who puts each file and what the
    manifest lists for it, as Ray merges the ranks' folders into one."""

    owners: dict[str, int]  # name -> the lowest rank that holds it: that rank puts it
    entries: dict[str, tuple[int, str]]  # name -> the owner's (size, sha256)
    conflicts: list[str]  # names two ranks hold with different bytes (the lowest rank's kept)

    def remote(self) -> dict[str, tuple[int, int, str]]:
        """The files rank 0 does not hold: name -> (rank, size, sha256)."""
        return {n: (r, *self.entries[n]) for n, r in self.owners.items() if r != 0}


def layout_of(catalogs: Sequence[Mapping[str, tuple[int, str]] | None]) -> Layout | None:
    """Every rank's catalog as one checkpoint; None when no rank passed one. A name two
    ranks wrote with different bytes keeps the lowest rank's (Ray leaves the winner to
    chance); an empty folder is still a checkpoint."""
    if all(c is None for c in catalogs):
        return None
    owners: dict[str, int] = {}
    entries: dict[str, tuple[int, str]] = {}
    conflicts: set[str] = set()
    for rank, catalog in enumerate(catalogs):
        for name, entry in (catalog or {}).items():
            if name not in owners:
                owners[name], entries[name] = rank, tuple(entry)  # type: ignore[assignment]
            elif entries[name] != tuple(entry):
                conflicts.add(name)
    return Layout(owners, entries, sorted(conflicts))


def restore_batches(sizes: Mapping[str, int], limit: int) -> list[list[str]]:
    """The files of a restore in batches of at most ``limit`` bytes each (a larger file
    alone), the largest first: a rank holds one batch at a time on its way to disk."""
    batches: list[list[str]] = []
    held = 0
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        if not batches or held + sizes[name] > limit:
            batches.append([])
            held = 0
        batches[-1].append(name)
        held += sizes[name]
    return batches


def read_function_files(store: Any, m: Any, folder: str, skip: Collection[str] = ()) -> None:
    """A function's files of checkpoint ``m`` (not the orchestrator's RNG states, nor
    ``skip``) from ``store`` into ``folder``, a bounded batch at a time, each verified as
    it streams in."""
    theirs = {f.name: f.size for f in m.files if not func_exact.is_ours(f.name) and f.name not in skip}
    for names in restore_batches(theirs, RESTORE_BATCH_BYTES):
        write_files(store.read_many(m, names), folder)


def reports_at(extra: Mapping[str, Any], step: int) -> int:
    """The reports a function had made when it reported the checkpoint whose manifest
    carries ``extra``; one committed before they were counted: at least its step."""
    reports = extra.get("reports")
    return reports if isinstance(reports, int) and not isinstance(reports, bool) and reports >= step else step


_RAY_REPORT_LINE = re.compile(r"Reporting training result (\d+): TrainingReport\(checkpoint=None,")


def annotated_report_line(message: str, committed: Mapping[int, int]) -> str:
    """Ray's log line for a report (``Reporting training result N: TrainingReport(checkpoint=None,
    ...``) says what its report got: no checkpoint, since the run's go to its stores. For
    the N-th report of this worker that carried one (``committed``: N -> the step it was
    committed as), the line says where it went instead; other lines stay as Ray wrote them."""
    match = _RAY_REPORT_LINE.match(message)
    step = None if match is None else committed.get(int(match.group(1)))
    if step is None:
        return message
    return message.replace("checkpoint=None", f"checkpoint=<step {step} in the run's stores>", 1)


class _ReportLineFilter(logging.Filter):
    def __init__(self, committed: Mapping[int, int]) -> None:
        super().__init__()
        self.committed = committed

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and not record.args:
            record.msg = annotated_report_line(record.msg, self.committed)
        return True


def _saved(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def call_user_function(fn: Callable[..., Any], params: dict[str, Any]) -> Any:
    """As Ray Train calls it: with the config if the function takes an argument, else bare."""
    try:
        takes = len(inspect.signature(fn).parameters) > 0
    except (TypeError, ValueError):  # a builtin or C callable: assume Ray's usual signature
        takes = True
    return fn(params) if takes else fn()


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# --- the hook ---------------------------------------------------------------------------


class ReportSink(Protocol):
    def report(self, metrics: dict[str, Any], checkpoint: Any, delete_local: bool) -> Any:
        """The report's checkpoint taken (None: Ray's report carries none), or given back
        for Ray's own report to persist (a search's trial, which Ray Train's run keeps)."""

    def get_checkpoint(self) -> Any: ...


class StoreFnUtils(ray_fn_utils.TrainFnUtils):
    """Ray's TrainFnUtils with report and get_checkpoint sent to ``sink``; the rest stays Ray's."""

    def __init__(self, inner: ray_fn_utils.TrainFnUtils, sink: ReportSink) -> None:
        self.inner = inner
        self.sink = sink

    def report(
        self,
        metrics: dict[str, Any],
        checkpoint: Any = None,
        checkpoint_dir_name: str | None = None,
        checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
        delete_local_checkpoint_after_upload: bool | None = None,
        checkpoint_upload_fn: Callable[..., Any] | None = None,
        validation: Any = False,
    ) -> None:
        # The folder name, upload mode and upload function concern Ray's storage: our
        # store names a checkpoint by its step and commits it its own way.
        if validation:
            raise ValueError(
                "ray.train.report(validation=...) needs the trainer's validation_config, which job.train_func "
                "runs do not set"
            )
        passed = self.sink.report(metrics, checkpoint, bool(delete_local_checkpoint_after_upload))
        self.inner.report(metrics, passed)

    def get_checkpoint(self) -> Any:
        return self.sink.get_checkpoint()

    def get_all_reported_checkpoints(
        self,
        consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
        timeout_s: float | None = None,
    ) -> Any:
        # Ray never holds this run's checkpoints (each report hands it none), so its list
        # would be empty: refused by name rather than answered wrongly.
        raise RuntimeError(
            "ray.train.get_all_reported_checkpoints() is not available under job.train_func: the run's "
            "checkpoints live in its stores, verified on restore; ray.train.get_checkpoint() returns the "
            "newest one that verifies"
        )

    def get_dataset_shard(self, dataset_info: Any) -> Any:
        return self.inner.get_dataset_shard(dataset_info)

    def get_context(self) -> Any:
        return self.inner.get_context()

    def get_preemption_info(self) -> Any:
        return self.inner.get_preemption_info()

    def is_distributed(self) -> bool:
        return self.inner.is_distributed()

    def barrier(self) -> None:
        return self.inner.barrier()

    def broadcast_from_rank_zero(self, data: Any) -> Any:
        return self.inner.broadcast_from_rank_zero(data)

    def __getattr__(self, name: str) -> Any:
        # What Ray adds to its own utils (e.g. local mode's _get_last_metrics).
        if name in ("inner", "sink"):
            raise AttributeError(name)
        return getattr(self.inner, name)


@contextlib.contextmanager
def routed_through(sink: ReportSink) -> Iterator[StoreFnUtils]:
    """While inside, ray.train.report / get_checkpoint reach ``sink``; Ray's own utils after."""
    if not is_v2_enabled():
        # Train v1's report does not go through TrainFnUtils: checkpoints would bypass our stores.
        raise RuntimeError("job.train_func needs Ray Train v2: unset RAY_TRAIN_V2_ENABLED=0 (v2 is Ray's default)")
    inner = ray_fn_utils.get_train_fn_utils()
    ours = StoreFnUtils(inner, sink)
    ray_fn_utils.set_train_fn_utils(ours)
    try:
        yield ours
    finally:
        ray_fn_utils.set_train_fn_utils(inner)


# --- the worker ---------------------------------------------------------------------------


def train_func(config: dict[str, Any]) -> None:
    """What every Ray Train worker runs when the job names a train function."""
    run_worker(config, FuncRun)


# The most checkpoint bytes a rank holds at once while it restores a train function's folder.
RESTORE_BATCH_BYTES = 64 * 2**20
# The folder of a node's scratch disk that holds the checkpoint folders ranks restored.
RESTORED = "function-restores"


class FuncRun(WorkerAttempt):
    """One worker's side of a train-function attempt: restore, the report sink, the end.

    Checkpoint choice, the chaos rendezvous and the preemption watch are the shared
    worker's (orchestrator/runtime/loop/worker.py), so they behave exactly as in the built-in loop.
    """

    def __init__(self, spec: RuntimeSpec, rank: int, world: int, control: ControlChannel) -> None:
        super().__init__(spec, rank, world, control)
        self.count = 0  # the step of the run's newest checkpoint (a restore starts it at its step)
        # Reports made in the run so far, the function's clock: each report is one step (a
        # restore starts it at its checkpoint's).
        self.reports = 0
        self.restored_reports = 0
        self.total = declared_reports(spec.job.params)
        self.restored = 0
        self.restored_dir: str | None = None
        self.preempting = False  # a notice is agreed; the next checkpoint is the last
        self.metrics: dict[str, Any] = {}  # rank 0's last reported
        # Rank 0: the newest checkpoint's files (name -> sha256), restored or handed over.
        self._digests: dict[str, str] | None = None
        self._last_progress = 0.0
        self._t_start = time.time()
        # This worker's reports so far, as Ray numbers them in its log, and the step each
        # one that carried a checkpoint was committed as.
        self._calls = 0
        self._committed_calls: dict[int, int] = {}
        # The restored checkpoint's RNG states (func_exact), put back at the function's first
        # get_checkpoint(); None once put back (or with nothing to put back).
        self._rngs: dict[str, bytes] | None = None
        # job.clock: the metric's value at the last report (at_step triggers cross it).
        self.clock = 0
        # The files this rank puts, kept on its node: a group restarted in place reads
        # them (and its node's peers') from there (checkpoint/scratch.py's RankCopy).
        # This node's scratch disk (None: the cluster has none), where that copy and the
        # folders a restore fills lie: it goes with the cluster.
        self.node_dir = node_scratch(spec.scratch_dir, my_node()) if spec.scratch_dir else None
        self.rank_copy = RankCopy(self.node_dir, rank) if self.node_dir else None
        self._copy_keeper = None if self.rank_copy is None else ScratchKeeper(self.rank_copy.mine, self._copy_event)
        self._from_node: tuple[int, int] = (0, 0)  # the restore's files and bytes read from the node

    def kept_on_choice(self, name: str) -> bool:
        # Every rank reads the folder to disk itself: rank 0 keeps nothing in memory, and
        # finds every file with its size only while choosing (its readers verify them).
        return False

    # Rank 0 keeps no whole copy of a function's checkpoint: each rank keeps what it puts.
    keeps_whole_copy = False

    # --- the attempt ---------------------------------------------------------------------
    def run(self) -> None:
        try:
            self.guarded(self._run)
        finally:
            # Ends the preemption watch thread: nothing reads the flag once the function is done.
            self._preempt.set()
            if self.restored_dir is not None:
                shutil.rmtree(self.restored_dir, ignore_errors=True)

    def _run(self) -> None:
        from orchestrator.workloads import train_function

        fn = train_function(self.spec.job.train_func)  # a module that fails to import: a user error
        if self.rank == 0:
            self.control.event(self.gen, "workers_ready", pid=os.getpid(), standby=self.spec.standby)
        self.wait_until_active()
        restored = self.restore()
        # Every rank's pid, in rank order: a kill_worker drill strikes the last one, as an
        # at_step kill_worker does.
        pids = [int(p) for p in self.every_ranks(os.getpid())]
        if self.rank == 0:
            self.control.event(
                self.gen,
                "train_started",
                restored_step=restored,
                restored_from=self._restored_url,
                pid=os.getpid(),
                world_size=self.world,
                worker_pids=pids,
            )
        # Seeded as late as possible: what the worker did before (the restore's choice, the
        # group's forming) draws nothing the function will.
        func_exact.seed_rank(self.spec.job.seed, self.rank)
        self._t_start = time.time()
        lines = _ReportLineFilter(self._committed_calls)
        ray_context.logger.addFilter(lines)
        try:
            with routed_through(self):
                call_user_function(fn, dict(self.spec.job.params))
        finally:
            ray_context.logger.removeFilter(lines)
        if self.rank == 0:
            self.finish()

    def restore(self) -> int:
        """The newest checkpoint that verifies, in a local folder on every rank; its step (0: none)."""
        agreed = self.restore_agreed(self._read_restore, drop=lambda got: shutil.rmtree(got[0], ignore_errors=True))
        if agreed is None:
            return 0
        source, m, (folder, rngs) = agreed
        files, size = self._from_node
        if files:
            self.control.event(self.gen, "restored_from_scratch", step=m.step, rank=self.rank, files=files, bytes=size)
        self.restored_dir, self._rngs = folder, rngs
        self._restored_url = source.checkpoint_url(self.spec.run_id, m.step)
        self._digests = {f.name: f.sha256 for f in m.files}
        self.count = self.restored = m.step
        self.reports = self.restored_reports = reports_at(m.extra, m.step)
        clock = m.extra.get("clock")
        self.clock = clock if isinstance(clock, int) and not isinstance(clock, bool) and clock >= 0 else 0
        return m.step

    def _read_restore(self, source: Any, m: Any) -> tuple[str, dict[str, bytes] | None]:
        """Checkpoint ``m`` in a new local folder, and this rank's share of its RNG states.
        Rank 0 only found the files with their sizes while choosing (see kept_on_choice):
        each rank reads the whole folder, a bounded batch at a time, each file verified as it
        streams in, straight to disk; a folder whose files failed is removed."""
        self._verified = {}
        folder = tempfile.mkdtemp(prefix=f"orch-restore-{self.spec.run_id}-step{m.step}-", dir=self._restore_parent())
        try:
            ours = [f.name for f in m.files if func_exact.is_ours(f.name)]
            rngs = source.read_many(m, ours) if ours else None
            on_node = self._take_from_node(m, folder)
            read_function_files(source, m, folder, skip=on_node)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return folder, rngs

    def _restore_parent(self) -> str | None:
        """Where restored folders go: the node's scratch disk, which goes with its cluster,
        so a rank killed before it removed its folder leaves nothing behind on the machine
        (the system's temp folder where the cluster has no scratch disk)."""
        if self.node_dir is None:
            return None
        parent = os.path.join(self.node_dir, RESTORED)
        os.makedirs(parent, mode=0o700, exist_ok=True)
        return parent

    def _take_from_node(self, m: Any, folder: str) -> set[str]:
        """The files of ``m`` this node's rank copies hold as its manifest lists them,
        written into ``folder``: the names (the store gives the rest)."""
        self._from_node = (0, 0)
        if self.rank_copy is None:
            return set()
        theirs = [f.name for f in m.files if not func_exact.is_ours(f.name)]
        taken: set[str] = set()
        size = 0
        for name, data in self.rank_copy.take(m, theirs):
            write_files({name: data}, folder)
            taken.add(name)
            size += len(data)
        self._from_node = (len(taken), size)
        return taken

    def _keep_on_node(self, step: int, own: Mapping[str, bytes]) -> None:
        """The function's files this rank puts, on its node (a full disk costs the copy)."""
        if self.rank_copy is None or self._copy_keeper is None:
            return
        copy, theirs = self.rank_copy, {n: d for n, d in own.items() if not func_exact.is_ours(n)}
        self._copy_keeper.keep(step, lambda: copy.keep(theirs))

    def _copy_event(self, type_: str, fields: dict[str, Any]) -> None:
        self.control.event(self.gen, type_, rank=self.rank, **fields)

    def finish(self) -> None:
        """Rank 0, the function returned: the last checkpoint committed, then the result."""
        self.flush_losses()
        self.checkpointer.wait()
        elapsed = max(time.time() - self._t_start, 1e-9)
        self.control.progress(self.gen, step=self.reports, **self._progress_fields(elapsed))
        self.control.final(
            self.gen,
            final_step=self.reports,
            metrics=self.metrics,
            weights_sha256=self._final_weights(),
            checkpoint_sha256=None if self._digests is None else checkpoint_digest(self._digests),
            final_checkpoint=self.last_checkpoint,
            train_steps_per_s=(self.reports - self.restored_reports) / elapsed,
        )

    def _final_weights(self) -> str | None:
        """Rank 0: the digest of the model in the run's final checkpoint (func_weights), read
        back: from the folder it restored when it committed none since, else from the store
        it committed to, each file verified as it streams in; None with no checkpoint, or
        one that holds no tensor."""
        if self._digests is None:
            return None
        step = self.checkpointer.committed_step
        if step is None:
            return None if self.restored_dir is None else folder_weights_sha256(self.restored_dir)
        for store in self.checkpointer.stores:
            m, verdict = store.trusted_manifest(self.spec.run_id, step)
            if m is None or not verdict.ok:
                continue
            with tempfile.TemporaryDirectory(prefix=f"orch-weights-{self.spec.run_id}-") as folder:
                read_function_files(store, m, folder)
                return folder_weights_sha256(folder)
        return None

    # --- the report sink (StoreFnUtils calls these on every rank) ---------------------------
    def get_checkpoint(self) -> Any:
        """The checkpoint this attempt restored (None on a fresh start), as a local folder."""
        if self.restored_dir is None:
            return None
        if self._rngs is not None:
            # The function resumes here: the draws after this are those after the report
            # that checkpoint came with.
            state = func_exact.rng_for(self.rank, self._rngs)
            self._rngs = None
            if state is not None:
                set_rng_state(torch.load(io.BytesIO(state), weights_only=True), self.collective_device())
        from ray.train import Checkpoint

        return Checkpoint.from_directory(self.restored_dir)

    def report(self, metrics: dict[str, Any], checkpoint: Any, delete_local: bool) -> None:
        mine = None
        if checkpoint is not None:
            with checkpoint.as_directory() as folder:
                mine = read_checkpoint_dir(folder)
            if delete_local and getattr(checkpoint.filesystem, "type_name", "") == "local":
                shutil.rmtree(checkpoint.path, ignore_errors=True)
        self._calls += 1
        before = self.clock
        any_checkpoint, notice, self.clock = self._agree(mine is not None, self._clock_of(metrics))
        self.preempting = self.preempting or notice
        plan = plan_report(self.reports, any_checkpoint, self.preempting, self.spec.checkpoint.async_upload)
        self.reports = plan.step
        if plan.commit:
            # The RNG states as the function left them at this report (nothing since drew from
            # them): what a resume from this report's checkpoint puts back. Only with a
            # checkpoint: a function that reports every step pays nothing for them.
            rng = _saved(rng_state(self.collective_device()))
            catalogs, index, rngs = self._catalogs(None if mine is None else catalog_of(mine), rng)
            # Rank 0 puts every rank's RNG states (they came with the catalogs).
            states = {func_exact.rng_name(r): b for r, b in enumerate(rngs)}
            catalogs = [{**(catalogs[0] or {}), **catalog_of(states)}, *catalogs[1:]]
            layout = layout_of(catalogs)
            assert layout is not None, "plan_report commits only when some rank passed a checkpoint"
            self.count = plan.step
            self._committed_calls[self._calls] = plan.step
            # Each rank puts the files it is the lowest rank to hold; no rank sees another's bytes.
            own = {n: mine[n] for n, r in layout.owners.items() if r == self.rank and n in mine} if mine else {}
            self._keep_on_node(plan.step, own)
            if self.rank == 0:
                own |= states
                self._commit(plan.step, own, layout, metrics, plan.wait, index)
            elif self.share_upload is not None:
                self.share_to(index)  # where rank 0 commits now
                # This rank owns them: layout.entries holds its own catalog's sha256 of them.
                self.share_upload.submit(plan.step, own, {n: layout.entries[n][1] for n in own}, own=True)
        if self.rank == 0:
            self.metrics = dict(metrics)
            loss = _number(metrics.get("loss"))
            if loss is not None and math.isfinite(loss):
                self._losses.append((plan.step, loss))
            self._progress(force=plan.commit)
        if plan.stop:
            if self.rank == 0:
                self.flush_losses()
                self.control.event(self.gen, "preempted", step=plan.step, checkpoint=self.last_checkpoint)
            raise Stop(plan.step)
        self._chaos(plan.step, before)

    def _clock_of(self, metrics: Mapping[str, Any]) -> int:
        """This report's value of job.clock's metric (0 without one: the reports count)."""
        name = self.spec.job.clock
        if not name:
            return 0
        value = metrics.get(name) if isinstance(metrics, Mapping) else None
        number = _number(value)
        if number is None or isinstance(value, bool) or not math.isfinite(number):
            shown = ", ".join(sorted(str(k) for k in metrics)[:12]) if isinstance(metrics, Mapping) else "none"
            raise UserCodeError(
                f"job.clock={name}: report {self._calls} carries no number named {name!r} (its metrics: {shown}); "
                "report it with every ray.train.report, or leave job.clock empty to count reports"
            )
        return int(number)

    # --- chaos on the function's clock --------------------------------------------------
    def _chaos(self, step: int, before: int) -> None:
        """The faults an at_step (or random) trigger makes due at this report: on the reports'
        clock, the one whose step it is; on job.clock's, the first report whose metric
        reaches it. Every rank decides the same (the clock is agreed), so all of them
        quiesce; then the victim (the last rank for kill_worker, else rank 0) asks the
        controller to fire it and waits."""
        total = self.total or self.spec.job.steps
        if self.spec.job.clock:
            due = [i for i, f in enumerate(self.spec.faults) if crossed(f, before, self.clock, total)]
        else:
            due = [i for i, f in enumerate(self.spec.faults) if due_at_step(f, step, total)]
        if not due:
            return
        self.quiesce()
        for i in due:
            self.strike(i, step)

    def _agree(self, have_checkpoint: bool, clock: int) -> tuple[bool, bool, int]:
        """Every rank learns whether any rank passed a checkpoint, whether rank 0 has seen a
        preemption notice, and the clock (job.clock's metric, the highest any rank reported):
        one tiny all-reduce (every rank calls report, so every rank is here)."""
        notice = self._preempt.is_set()
        if self.world == 1:
            return have_checkpoint, notice, clock
        import torch.distributed as dist

        flags = torch.tensor(
            [int(have_checkpoint), int(notice), clock], dtype=torch.int64, device=self.collective_device()
        )
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return bool(flags[0].item()), bool(flags[1].item()), int(flags[2].item())

    def _catalogs(self, mine: Catalog | None, rng: bytes) -> tuple[list[Catalog | None], int, list[bytes]]:
        """Every rank's catalog of its checkpoint folder (names, sizes, sha256) and RNG states,
        on every rank, with the index of the store rank 0 commits to now."""
        index = self.checkpointer.store_index if self.rank == 0 else 0
        out = self.every_ranks((mine, index, rng))
        return [got[0] for got in out], int(out[0][1]), [got[2] for got in out]

    def _commit(
        self, step: int, own: dict[str, bytes], layout: Layout, metrics: dict[str, Any], wait: bool, index: int
    ) -> None:
        """Rank 0: its own files put, the other ranks' awaited in the store, one manifest."""
        if layout.conflicts:
            self.control.event(
                self.gen, "checkpoint_merge_conflict", step=step, names=layout.conflicts[:20], kept="the lowest rank"
            )
        self._digests = {name: sha for name, (_, sha) in layout.entries.items()}
        if self._upload_fault_armed():
            self._upload_staged.clear()
        extra = {"world_size": self.world, "train_func": self.spec.job.train_func, "reports": self.reports}
        if self.spec.job.clock:
            extra["clock"] = self.clock
        self.checkpointer.submit(step, own, extra=extra, remote=layout.remote(), store_index=index)
        if wait:
            self.checkpointer.wait()
        # "during: checkpoint_upload" lands before the function goes on (see _Loop.hold_for_upload_fault).
        self.hold_for_upload_fault()

    def _progress(self, force: bool) -> None:
        now = time.time()
        if not force and now - self._last_progress < PROGRESS_EVERY_S:
            return
        self._last_progress = now
        self.control.progress(self.gen, step=self.reports, **self._progress_fields(now - self._t_start))
        self.flush_losses()

    def _progress_fields(self, elapsed: float) -> dict[str, Any]:
        """What the function reported: its reports so far (of the total its config declares,
        if it does), their rate, its metrics. ``step`` is its reports too: the run's clock."""
        return {
            "total": self.total,
            "reports": self.reports,
            "loss": _number(self.metrics.get("loss")),
            "steps_per_s": (self.reports - self.restored_reports) / max(elapsed, 1e-9),
            "last_checkpoint": self.last_checkpoint,
            "restored_step": self.restored,
            "metrics": self.metrics,
        }
