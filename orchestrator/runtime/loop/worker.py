"""What every Ray Train worker of an attempt does, whatever trains on it.

Two kinds of worker share it: the built-in training loop (``train_loop._Loop``,
``job.workload``) and a user's Ray Train function (``func_mode.FuncRun``,
``job.train_func``). Both commit checkpoints through the same uploader (manifest
last, sha256, replication, fencing, fallback stores), choose a restore the same way
(the newest checkpoint that verifies on the lineage, read and verified on rank 0
before the ranks agree on it), meet the chaos injector at the same points, watch for
preemption notices, and tell a user's error from the platform's.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

from orchestrator.runtime import fault_rendezvous
from orchestrator.runtime.checkpoint.background import AsyncCheckpointer, CheckpointUploadError
from orchestrator.runtime.checkpoint.handover import handed_over
from orchestrator.runtime.checkpoint.restore_clock import RestoreClock
from orchestrator.runtime.checkpoint.restore_failure import READ_ERRORS, restore_failure
from orchestrator.runtime.checkpoint.shard_index import is_shard_file
from orchestrator.runtime.checkpoint.share_upload import ShareUpload
from orchestrator.runtime.loop import rank_log
from orchestrator.wire import runkey
from orchestrator.wire.control import ControlChannel, Invalid
from orchestrator.wire.faults import FaultKind
from orchestrator.wire.sections import FaultSpec
from orchestrator.wire.spec import RuntimeSpec
from orchestrator.wire.triggers import due_during
from recovery.fencing import Admits, FencedError, Lineage, Narrowed
from recovery.manifest import Manifest
from recovery.replication import load_newest
from recovery.store import CheckpointStore, scan_fences

T = TypeVar("T")
PROGRESS_EVERY_S = 0.5
STANDBY_POLL_S = 0.05
PREEMPT_POLL_S = 0.2


class UserCodeError(Exception):
    """The workload raised: retrying elsewhere will not help."""


class InjectedUserError(RuntimeError):
    """Stands for a bug in the workload (chaos fault ``user_error``)."""


class Stopped(BaseException):
    """A worker stops on purpose: its last checkpoint is committed and the driver told
    (a preemption). A BaseException: a user's ``except Exception`` must not swallow it."""


def _is_rng_file(name: str) -> bool:
    return name.startswith("rng-")


def restored_by_rank0(name: str) -> bool:
    """The files rank 0 keeps from the checkpoint it chose: the shared state and its own
    RNG (every other rank reads its own RNG file itself). A sharded checkpoint's rank
    files each rank reads itself, only those it needs."""
    if is_shard_file(name):
        return False
    return not _is_rng_file(name) or name == "rng-rank0.pt"


def handed_to_group(name: str) -> bool:
    """Of the files rank 0 verified while choosing, those it hands every other rank over
    the collective (one download for the group): all but its own RNG state."""
    return not _is_rng_file(name)


def _is_comm_error(exc: BaseException) -> bool:
    # A dead peer surfaces in the survivors as a collective failure: that is Ray
    # Train's to handle, not the workload's fault.
    dist_error = getattr(torch.distributed, "DistError", ())
    if dist_error and isinstance(exc, dist_error):
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    # "Default process group has not been initialized": Ray Train's group torn down under a
    # rank mid-restart (the loop's collectives run only in a group Ray Train set up).
    words = ("gloo", "connection reset", "connection closed", "nccl", "broken pipe", "process group has not been")
    return any(word in text for word in words)


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it wraps, each once: a Ray task error's ``cause``,
    ``__cause__`` and ``__context__``."""
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]


def is_comm_failure(exc: BaseException) -> bool:
    """A collective broken under this rank (a lost peer), anywhere in ``exc``'s causes."""
    return any(_is_comm_error(e) for e in causes(exc))


def release_frames(exc: BaseException) -> None:
    """Drop the locals of every frame ``exc`` (and what it wraps) went through: nothing
    of the failed step (the DDP wrapper, and through it the broken group) stays alive."""
    for e in causes(exc):
        if e.__traceback__ is not None:
            traceback.clear_frames(e.__traceback__)


def _ray_system_errors() -> tuple[type[BaseException], ...]:
    import ray.exceptions as rx

    return (
        rx.RayActorError,  # ActorDiedError: e.g. Ray Data's coordinator, gone with its node
        rx.NodeDiedError,
        rx.LocalRayletDiedError,
        rx.WorkerCrashedError,
        rx.ObjectLostError,  # OwnerDiedError, ObjectFetchTimedOutError...
        rx.RaySystemError,
        rx.RpcError,
        rx.ActorPlacementGroupRemoved,
        rx.TaskPlacementGroupRemoved,
        rx.ActorUnschedulableError,
        rx.TaskUnschedulableError,
        rx.ObjectStoreFullError,
        rx.OutOfDiskError,
    )


def is_infra_error(exc: BaseException) -> bool:
    """The platform failed under the workload (a dead peer, a dead node, a lost
    object), not the workload itself: Ray Train restarts it, or the controller
    fails over; never a user error that stops the run.

    A task's error wraps its cause (RayTaskError.cause, ``__cause__``): a Ray
    Data task that failed because an actor died is infrastructure too. So is a store's
    (a checkpoint file that stopped matching its manifest between rank 0's check and
    another rank's read: the restore is tried again, and passes over it).
    """
    from recovery.manifest import ManifestError
    from recovery.store import StoreError

    system = (*_ray_system_errors(), ManifestError, StoreError)
    return any(isinstance(e, system) or _is_comm_error(e) for e in causes(exc))


def full_traceback(exc: BaseException) -> str:
    """Every frame of ``exc``'s traceback, whatever ``sys.tracebacklimit`` says: SkyPilot's
    ``print_exception_no_traceback`` sets it to 0 and leaves it there when an exception
    passes through, which would cut the user's traceback down to its last line."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=sys.maxsize))


def run_worker(config: dict[str, Any], make: Callable[[RuntimeSpec, int, int, ControlChannel], Any]) -> None:
    """A Ray Train worker's entry: build the worker with ``make`` and run it; a user's
    error goes to the controller with its traceback, the platform's are left to Ray
    Train and the controller."""
    spec = RuntimeSpec.from_plain(config["spec"])
    runkey.from_config(config)
    import ray.train

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    rank_log.capture(spec.log_dir, rank, spec.generation)
    control = ControlChannel(spec.control_url, spec.control_options, keys=runkey.current())
    if rank == 0:
        control.event(spec.generation, "workers_started", pid=os.getpid())
    stop_watch = threading.Event()
    from orchestrator.runtime.group import rendezvous

    where = rendezvous.assignment()
    if where.watch if where is not None else ctx.get_local_rank() == 0:
        watch_node(spec, control, rank, stop_watch)
    attempt = None
    try:
        formed = join_group(spec, rank, world, control)
        attempt = make(spec, rank, world, control)
        formed()  # the group formed while this worker built its model and data
        attempt.run()
    except Stopped:
        return  # the checkpoint is committed and "preempted" sent; the driver tells the controller
    except Exception as exc:
        if not is_infra_error(exc) and not isinstance(exc, FencedError | CheckpointUploadError):
            from orchestrator.runtime.loop.user_site import user_site, user_traceback

            first = str(exc).splitlines()[0] if str(exc) else ""
            # The step it was raised in, where the worker knows it (0: while it was built):
            # the same error at the same step again after a restart is deterministic.
            step = 0 if attempt is None else getattr(attempt, "user_step", None)
            where = {"step": step} if isinstance(step, int) else {}
            site = user_site(exc)
            # Raised again when its step was run once more here: a bug, no restart needed.
            repeats = getattr(attempt, "user_error_repeats", False) is True
            control.event(
                spec.generation,
                "user_error",
                rank=rank,
                error=f"{type(exc).__name__}: {first}"[:500],
                traceback=user_traceback(exc)[-8000:],
                **where,
                **({"site": site} if site is not None else {}),
                **({"deterministic": True} if repeats else {}),
            )
        raise
    finally:
        stop_watch.set()


def join_group(spec: RuntimeSpec, rank: int, world: int, control: ControlChannel) -> Callable[[], None]:
    """Where the driver hosts the group's rendezvous (survivors kept, see group/rendezvous.py): join
    the epoch it assigned, or be refused (journaled) and stop as a fenced worker. The group
    forms in the background; the returned function waits for it."""
    from orchestrator.runtime.group import rendezvous

    where = rendezvous.assignment()
    if where is None:
        return lambda: None
    key = runkey.require().generation_key(spec.generation)
    member = rendezvous.GroupMember(
        spec, rank, world, key, "nccl" if spec.trainer.gpus_per_worker > 0 else "gloo", where
    )
    try:
        member.admitted()
    except rendezvous.Refused as exc:
        control.event(
            spec.generation, "regroup_refused", rank=rank, pid=os.getpid(), epoch=where.epoch, reason=str(exc)[:500]
        )
        raise FencedError(f"refused by the group of epoch {where.epoch}: {exc}") from None
    rendezvous.joined(member)
    return member.form_in_background()


def watch_node(spec: RuntimeSpec, control: ControlChannel, rank: int, stop: threading.Event) -> None:
    """One worker per node watches the node's own notices: the cloud's instance metadata
    (the region's preemption_notice) and Ray's drain of the node. A notice goes where the
    driver's SIGTERM relay puts one: preempt.json, which rank 0's watch reads."""
    from orchestrator.runtime import notices

    sources: list[notices.Source] = []
    cloud = notices.metadata_source(spec.preemption_notice.source, spec.preemption_notice.url)
    if cloud is not None:
        sources.append(cloud)
    drain = notices.ray_drain()
    if drain is not None:
        sources.append(drain)

    def notice(n: notices.Notice) -> None:
        fields = {"source": n.source, "action": n.action, "deadline": n.deadline, "rank": rank, "pid": os.getpid()}
        control.preempt_notice(spec.generation, **fields)
        control.event(spec.generation, "preemption_notice", **fields)

    def invalid(reason: str) -> None:
        control.event(spec.generation, "preemption_notice_invalid", reason=reason, rank=rank)

    notices.NodeWatch(sources, notice, invalid, stop).start()


def spec_stores(spec: RuntimeSpec, key: bytes) -> list[CheckpointStore]:
    """The attempt's stores, primary first, each holding the run's key (it signs and trusts)."""
    return [
        CheckpointStore(spec.store_url, region=spec.region, storage_options=spec.store_options, key=key),
        *[CheckpointStore(f.url, region=f.region, storage_options=f.options, key=key) for f in spec.fallback_stores],
    ]


def controller_lineage(spec: RuntimeSpec, control: ControlChannel) -> Lineage | None:
    """The lineage the controller handed this attempt: a standby's activation carries the
    one of the moment it was activated (its spec's was written before the handover)."""
    if spec.standby:
        activation = control.read_activation(spec.generation) or {}
        if "lineage" in activation:
            try:
                lineage = Lineage.from_plain(activation["lineage"])
            except ValueError:
                lineage = None  # damaged: the spec's, narrowed by the fences, still holds
            if lineage is not None and lineage.generation <= spec.generation:
                return lineage
    return spec.fencing_lineage()


def restore_rule(
    spec: RuntimeSpec, control: ControlChannel, stores: list[CheckpointStore]
) -> tuple[Admits, list[CheckpointStore]]:
    """What a restore may take, and from which stores: the controller's lineage, narrowed
    by the newest fence the stores hold (which may refuse, never allow more). A store
    whose fence cannot be read is left out, with its reason: an unseen fence may hide a
    newer generation. A fence this run's controller did not sign is ignored, with its
    reason: it can neither refuse nor allow. Without a lineage from the controller, the
    fence alone decides."""
    scan = scan_fences(stores, spec.run_id)
    for region, error in scan.failed.items():
        control.event(spec.generation, "restore_store_skipped", region=region, error=error[:500])
    for region, reason in scan.ignored.items():
        control.event(spec.generation, "fence_ignored", region=region, reason=reason[:500])
    usable = [s for s in stores if (s.region or s.url) not in scan.failed]
    given = controller_lineage(spec, control)
    return (scan.newest if given is None else Narrowed(given, scan.newest)), usable


class Prefetch:
    """``fn`` run now in a daemon thread (one stuck in a chaos rendezvous must not hold
    up the process's exit); ``result`` waits for it and returns or raises what it did."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="restore-choice", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # handed to the caller of result(), as if it had run there
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


class WorkerAttempt:
    """One worker's share of an attempt: the stores, the uploader (rank 0 writes), the
    restore choice, the chaos rendezvous and the preemption watch."""

    # Rank 0 keeps each committed checkpoint whole on its node's scratch disk (checkpoint/scratch.py).
    keeps_whole_copy = True

    def __init__(self, spec: RuntimeSpec, rank: int, world: int, control: ControlChannel) -> None:
        from orchestrator.runtime.group import rendezvous

        self.spec, self.rank, self.world, self.control = spec, rank, world, control
        self.gen = spec.generation
        # The group this rank joined through the driver's rendezvous (survivors kept), or None.
        self.member = rendezvous.current()
        joining = self.member is not None and self.member.members.mode == "join"
        self.store, *self.fallbacks = spec_stores(spec, runkey.require())
        self._restored_url: str | None = None
        self._verified: dict[str, bytes] = {}
        self._losses: list[tuple[int, float]] = []
        # Seconds snapshots blocked the loop since the last commit was journaled: each
        # checkpoint_committed carries them (stall_s), so a run's goodput has its stalls
        # even when an attempt dies before its final report.
        self._stall_lock = threading.Lock()
        self._unreported_stall_s = 0.0
        self.checkpointer = AsyncCheckpointer(
            [self.store, *self.fallbacks],
            spec.run_id,
            spec.generation,
            spec.checkpoint.keep_last,
            outage_s=spec.store_outage_s,
            on_event=self._checkpoint_event,
            replicate=True,
            on_stage=self._upload_hook if rank == 0 else None,
            scratch_dir=spec.scratch_dir if rank == 0 and self.keeps_whole_copy else None,
            lineage=spec.fencing_lineage(),
        )
        # Ranks > 0 put their share of a checkpoint's files (rank 0 commits; see checkpoint/share_plan.py).
        self.share_upload = ShareUpload(self.store, spec.run_id, spec.generation) if rank > 0 else None
        self._preempt = threading.Event()
        # chaos "during: checkpoint_upload": cleared while an upload heads for its
        # fault, set again once the fault has fired (or the upload ended without it).
        self._upload_staged = threading.Event()
        self._upload_staged.set()
        if rank == 0:
            threading.Thread(target=self._watch_preemption, name="preempt-watch", daemon=True).start()
        self._choice: Prefetch | None = None
        # (region, step) of checkpoints a rank found bad while restoring: never chosen again.
        self._bad_choices: set[tuple[str, int]] = set()
        # When rank 0's choice of a checkpoint began and ended (what a restore took).
        self.choice_began: float | None = None
        self.choice_ended: float | None = None
        # Where this rank's last restore went (restore_phases, with train_started).
        self.restore_clock = RestoreClock()
        if rank == 0 and not spec.standby and not joining:
            # The checkpoint is chosen and read while this worker builds its model and data
            # (a standby chooses once activated: the newest checkpoint is the one then).
            self._choice = Prefetch(lambda: self._choose(self._skipped))

    def guarded(self, body: Callable[[], None]) -> None:
        """Run ``body``; whatever breaks it, a checkpoint already handed over is still committed
        (and a rank's share of it put, so rank 0 need not wait for it in vain)."""
        try:
            body()
        except BaseException:
            try:
                self.checkpointer.wait()
            except Exception:
                pass  # the original error is the one to report
            self.wait_for_share()
            raise
        self.wait_for_share()

    def share_to(self, index: int) -> None:
        """Ranks > 0: put this rank's files into store ``index`` of the spec's stores from now
        on: the one rank 0 commits to (it falls back to the next region's store in an outage)."""
        stores = [self.store, *self.fallbacks]
        if self.share_upload is not None and 0 <= index < len(stores):
            self.share_upload.store = stores[index]

    def wait_for_share(self) -> None:
        """Ranks > 0: until this rank's share of the last checkpoint is put (bounded: rank 0
        puts whatever is missing)."""
        if self.share_upload is not None:
            self.share_upload.wait(self.spec.store_outage_s)

    def wait_until_active(self) -> None:
        """A warm standby holds here until the controller activates it."""
        if self.spec.standby:
            # Every rank polls on its own: a collective could time out on a long wait.
            while not self.control.is_active(self.gen):
                time.sleep(STANDBY_POLL_S)

    # --- checkpoints -----------------------------------------------------------------
    @property
    def last_checkpoint(self) -> str | None:
        return self.checkpointer.committed_url or self._restored_url

    def agree_on_restore(self) -> tuple[CheckpointStore, Manifest] | None:
        """Rank 0 chooses the checkpoint to restore, every rank learns it (None: start fresh)."""
        choice: list[Any] = [None]
        if self.rank == 0:
            prefetched, self._choice = self._choice, None
            chosen = prefetched.result() if prefetched is not None else self._choose(self._skipped)
            # With the choice, the sizes of the verified files rank 0 hands the group.
            shared = {n: len(b) for n, b in self._verified.items() if handed_to_group(n)} if self.world > 1 else {}
            choice = [None if chosen is None else (*chosen, shared)]
        if self.world > 1:
            import torch.distributed as dist

            dist.broadcast_object_list(choice, src=0)
        if choice[0] is None:
            return None
        index, text, shared = choice[0]
        if shared:
            with self.restore_clock.timing("handover_s"):
                got = handed_over(self.rank, self._verified, shared, self.collective_device())
            if self.rank != 0:
                self._verified = got
        return [self.store, *self.fallbacks][index], Manifest.from_json(text)

    def restore_agreed(
        self, read: Callable[[CheckpointStore, Manifest], T], drop: Callable[[T], None] | None = None
    ) -> tuple[CheckpointStore, Manifest, T] | None:
        """Every rank: the checkpoint rank 0 chose and what ``read`` read of it for this rank,
        each file verified as it streamed in (None: nothing to restore). A rank whose files
        do not verify tells the others: the group passes over that checkpoint together and
        agrees on the next, the skip journaled once with the rank and its reason. ``read``
        must make no collective call: a rank that failed is not in it. ``drop``: given what
        this rank read of a checkpoint another rank failed (a folder to remove)."""
        while True:
            chosen = self.agree_on_restore()
            if chosen is None:
                return None
            source, m = chosen
            got: list[T] = []
            failure = None
            try:
                got.append(read(source, m))
            except READ_ERRORS as exc:
                failure = restore_failure(exc, self.rank)
            bad = next((why for why in self.every_ranks(failure) if why), None)
            if bad is None:
                return source, m, got[0]
            if drop is not None:
                for passed_over in got:
                    drop(passed_over)
            self._bad_choices.add((source.region, m.step))
            if self.rank == 0:
                self._skipped(source, m.step, bad)

    def every_ranks(self, mine: Any) -> list[Any]:
        """Every rank's ``mine``, in rank order, on every rank (a collective)."""
        if self.world == 1:
            return [mine]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        device = self.collective_device()
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            dist.all_gather_object(out, mine)
        return out

    def collective_device(self) -> torch.device:
        """Where a collective's tensors live: NCCL needs this worker's GPU, gloo the CPU."""
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_backend() == "nccl":
            from ray.train.torch import get_device

            return get_device()
        return torch.device("cpu")

    def kept_on_choice(self, name: str) -> bool:
        """Rank 0: whether a file of the checkpoint it chooses is kept in memory as it is
        verified (and so not read again): the shared state and rank 0's RNG."""
        return restored_by_rank0(name)

    def _skipped(self, store: CheckpointStore, step: int, reason: str) -> None:
        self.control.event(self.gen, "checkpoint_skipped", step=step, reason=reason, region=store.region)

    def _choose(self, skipped: Any) -> tuple[int, str] | None:
        self.choice_began = time.monotonic()
        try:
            return self._choose_newest(skipped)
        finally:
            self.choice_ended = time.monotonic()

    def choice_s(self) -> float | None:
        """Rank 0: what its last choice of a checkpoint took (None: it made none)."""
        if self.choice_began is None or self.choice_ended is None:
            return None
        return self.choice_ended - self.choice_began

    def restore_work_s(self, called: float, ended: float) -> float:
        """Rank 0: what a restore took: its choice (made beside the model's build, or inside
        the restore for a standby) and its load (``called`` to ``ended``), the load's wait
        for the choice counted once."""
        if self.choice_began is None or self.choice_ended is None:
            return ended - called
        return (self.choice_ended - self.choice_began) + (ended - max(called, self.choice_ended))

    def _choose_newest(self, skipped: Any) -> tuple[int, str] | None:
        """Rank 0: the newest checkpoint whose every file reads back and verifies now.

        Each candidate's manifest is checked first, then its files are read once,
        verified as they stream in, and kept: a checkpoint that went bad after it
        was committed (a restore is when a corrupting fault bites) is skipped and
        the next tried, and what is loaded is exactly what was verified.
        """
        from recovery.manifest import ManifestError
        from recovery.store import StoreError

        stores = [self.store, *self.fallbacks]
        lineage, usable = restore_rule(self.spec, self.control, stores)

        def store_failed(store: CheckpointStore, error: str) -> None:
            self.control.event(self.gen, "restore_store_skipped", region=store.region, error=error[:500])

        bad = self._bad_choices
        # Checkpoints chosen (their manifests trusted) and so read: a failure of theirs is
        # one found while restoring, after the chaos point "during: restore" has passed.
        chosen: set[tuple[str, int]] = set()
        scratch = self.checkpointer.local
        # Whether the candidate being read is the one the node's scratch copy holds: its
        # files are then read from there, verified, not downloaded too (the store's are
        # found with their sizes only, and read after all if the copy fails).
        on_node = False

        def choose(store: CheckpointStore, m: Manifest) -> None:
            nonlocal on_node
            chosen.add((store.region, m.step))
            on_node = scratch is not None and scratch.holds(m)
            self._restore_hook(m.step)

        def read_later(name: str) -> bool:
            return not self.kept_on_choice(name) or on_node

        while True:

            def skip(store: CheckpointStore, step: int, reason: str) -> None:
                if (store.region, step) in chosen:
                    reason = f"failed verification while restoring: {reason}"
                if (store.region, step) not in bad:
                    skipped(store, step, reason)

            best = load_newest(
                self.spec.run_id,
                usable,
                skip,
                lineage=lineage,
                exclude=bad,
                on_store_error=store_failed,
                keep=self.kept_on_choice,
                before_read=choose,
                # What rank 0 does not keep, its reader verifies as it streams in: found
                # here with its size only, so every byte of a restore is hashed once.
                sized=read_later,
            )
            if best is None:
                return None
            store, m = best.store, best.manifest
            names = [f.name for f in m.files if self.kept_on_choice(f.name)]
            # load checks the copy's manifest again: the uploader may have replaced it since.
            local = scratch.load(m, names) if scratch is not None and on_node and names else None
            try:
                # Verified as it was read; a file not kept then is read and verified now.
                kept = {name: best.files[name] for name in names if name in best.files}
                missing = [name for name in names if name not in kept]
                self._verified = local if local is not None else kept | store.read_many(m, missing)
            except (ManifestError, StoreError) as exc:
                skipped(store, m.step, f"failed verification while restoring: {exc}")
                bad.add((store.region, m.step))
                continue
            if local is not None:
                self.control.event(self.gen, "restored_from_scratch", step=m.step)
            return stores.index(store), m.to_json()

    # --- chaos --------------------------------------------------------------------
    def _rendezvous(self, i: int, fault: FaultSpec, step: int, during: str | None = None) -> None:
        """Ask the controller to fire fault ``i`` now, and wait until it has."""
        self.flush_losses()  # what the fault may cut short is plotted up to here
        fault_rendezvous.meet(self.control, i, fault, step=step, rank=self.rank, generation=self.gen, during=during)
        if fault.kind == FaultKind.user_error:
            raise InjectedUserError(f"injected by chaos.faults[{i}] at step {step}")

    def _armed(self, i: int, fault: FaultSpec) -> bool:
        return fault_rendezvous.armed(self.control, i, fault, self.spec.region, self.spec.on_demand)

    def strike(self, i: int, step: int) -> None:
        """A step trigger's fault ``i`` due at ``step``: its victim (the last rank for
        kill_worker, else rank 0) asks the controller to fire it and waits; the other
        ranks go on. A random fault strikes a step once, also when the step is replayed."""
        fault = self.spec.faults[i]
        victim = self.world - 1 if fault.kind == FaultKind.kill_worker else 0
        if self.rank != victim or not self._armed(i, fault):
            return
        if fault.random is not None and step in self.control.fired_steps(i):
            return
        self._rendezvous(i, fault, step)

    def quiesce(self) -> None:
        """Every rank waits until rank 0's uploads are committed.

        Faults land at a quiescent point, so a run's outcome does not depend on
        upload timing (a fault during an upload is a trigger of its own). Rank 0
        alone commits, while the victim may be another rank: without the barrier a
        worker killed "just after a commit" could beat the commit it follows. The
        other ranks first finish putting their shares. Every rank reaches this step
        with the same faults due (triggers are pure), so every rank calls the barrier.
        """
        if self.rank == 0:
            self.checkpointer.wait()
        self.wait_for_share()
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def note_stall(self, seconds: float) -> None:
        """A snapshot blocked the loop ``seconds``: said with the next commit journaled."""
        with self._stall_lock:
            self._unreported_stall_s += max(0.0, seconds)

    def _checkpoint_event(self, type_: str, fields: dict[str, Any]) -> None:
        if type_ == "checkpoint_committed":
            with self._stall_lock:
                fields = {**fields, "stall_s": round(self._unreported_stall_s, 4)}
                self._unreported_stall_s = 0.0
        self.control.event(self.gen, type_, **fields)

    def _upload_hook(self, step: int) -> None:
        """Rank 0's uploader, half way through a checkpoint (files sent, no manifest)."""
        try:
            for i, fault in enumerate(self.spec.faults):
                if due_during(fault, "checkpoint_upload") and self._armed(i, fault):
                    self._rendezvous(i, fault, step, during="checkpoint_upload")
        finally:
            self._upload_staged.set()

    def _upload_fault_armed(self) -> bool:
        return any(
            due_during(fault, "checkpoint_upload") and self._armed(i, fault) for i, fault in enumerate(self.spec.faults)
        )

    def hold_for_upload_fault(self) -> None:
        """Rank 0, before the next step trains: a fault "during: checkpoint_upload"
        lands while the upload is half way and training has not moved on.

        The uploader waits on the controller to fire the fault, and training would go
        on meanwhile (further under load), so the fault's place, and the steps a kill
        there costs, would depend on timing. The other ranks wait in the next
        step's all-reduce. Only a drill holds; an ordinary upload never does.
        """
        deadline = time.time() + fault_rendezvous.WAIT_S
        while not self._upload_staged.wait(0.05):
            if not self.checkpointer.pending or time.time() > deadline:
                # The upload ended before its fault (it failed, or the fault ran out).
                self._upload_staged.set()

    def _restore_hook(self, step: int) -> None:
        """Rank 0, a checkpoint chosen, before a byte of it is read."""
        for i, fault in enumerate(self.spec.faults):
            if due_during(fault, "restore") and self._armed(i, fault):
                self._rendezvous(i, fault, step, during="restore")

    # --- preemption and the loss plot ---------------------------------------------------
    def _watch_preemption(self) -> None:
        said = False
        while not self._preempt.is_set():
            try:
                notice = self.control.preempt_or_invalid(self.gen)
                if isinstance(notice, Invalid):
                    # Not this attempt's (a store writer's, say): no checkpoint, no stop; said once.
                    if not said:
                        reason = f"preempt.json {notice.reason}: ignored"
                        self.control.event(self.gen, "preemption_notice_invalid", reason=reason, rank=self.rank)
                    said = True
                elif notice is not None:
                    self._preempt.set()
                    return
            except OSError:
                pass
            time.sleep(PREEMPT_POLL_S)

    def flush_losses(self) -> None:
        """The loss samples since the last flush, as one event (the report's plot reads them)."""
        points, self._losses = self._losses, []
        if points:
            self.control.event(self.gen, "losses", points=points)
