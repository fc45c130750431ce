"""The training function every Ray Train worker runs.

It owns what makes a resumed run bitwise equal to one that never failed: the
seed, the data position (the step), model + optimizer + per-rank RNG states in
every checkpoint, and a restore that only takes checkpoints that verify. Ray
Train re-runs this function after an in-cluster worker failure; it then
restores from the store, which is the only truth.

Elastic worlds: the run's logical world is ``trainer.workers`` (L); Ray Train may
start it with any w from ``trainer.min_workers`` to L. The global batch stays L's:
each worker trains its logical shards (``recovery.elastic.shards``), accumulating
their gradients, scaled so that DDP's mean over w ranks is the mean over all L
shards. At w == L the arithmetic is exactly the fixed-world one.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import statistics
import time
from typing import Any

import numpy as np
import torch

from orchestrator.runtime.checkpoint.restore_clock import RestoreClock
from orchestrator.runtime.checkpoint.shard_index import (
    INDEX_NAME,
    REST_NAME,
    ShardIndexError,
    build_index,
    files_needed,
    parse_index,
    shard_file,
)
from orchestrator.runtime.checkpoint.shard_restore import ShardFileError, ShardFiles, read_shards
from orchestrator.runtime.checkpoint.sharding import FullModel, FullOptimizer, load_shards, save_shards
from orchestrator.runtime.checkpoint.share_plan import assign_shares, sha256_all
from orchestrator.runtime.checkpoint.spill import spill
from orchestrator.runtime.group.node_label import known, my_node
from orchestrator.runtime.group.survivors import GroupRecovery
from orchestrator.runtime.loop.dataflow import WorkerData
from orchestrator.runtime.loop.fsdp import ShardUnitError, checkpoint_activations, shard, shard_units
from orchestrator.runtime.loop.weights import local_state_bytes, weights_sha256
from orchestrator.runtime.loop.worker import (  # noqa: F401  (InjectedUserError, is_infra_error: re-exported)
    PROGRESS_EVERY_S,
    InjectedUserError,
    Stopped,
    UserCodeError,
    WorkerAttempt,
    is_comm_failure,
    is_infra_error,
    release_frames,
    restore_rule,
    run_worker,
)
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.faults import FaultKind
from orchestrator.wire.sections import TrainerSection
from orchestrator.wire.spec import RuntimeSpec
from orchestrator.wire.triggers import due_at_step
from orchestrator.workloads.base import Stateful
from orchestrator.workloads.data import DataMismatch
from recovery.elastic import min_world

# Ranks agree on a preemption notice every this many steps (one tiny all-reduce):
# all of them must checkpoint the same step.
PREEMPT_CHECK_EVERY = 10
# The parts of a checkpoint DDP keeps bit-for-bit the same on every rank (the same
# gradients, all-reduced, on the same parameters): any rank may put them.
SAME_ON_EVERY_RANK = ("model", "optimizer", "scheduler", "grad_scaler")
# Rank 0 samples the loss this often for the incident report's plot (sent with progress).
LOSS_EVERY = 5


class Preempted(Stopped):
    """A preemption notice arrived and the checkpoint of this step is committed."""


def _dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _close_shards(read: tuple[dict[str, bytes], ShardFiles | None]) -> None:
    """What a rank read of a checkpoint the group passed over: its shard files removed."""
    if read[1] is not None:
        read[1].close()


def _loads(data: bytes) -> Any:
    # On the CPU first: a checkpoint written on a GPU restores on any node; load_state_dict
    # copies each tensor to where its model or optimizer lives.
    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


def rng_state(device: torch.device | None = None) -> dict[str, Any]:
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        # numpy's state holds an ndarray, which weights_only refuses: store it as a tensor.
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
    }
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device | None = None) -> None:
    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in state and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def worker_device(trainer: TrainerSection) -> torch.device:
    """Ray Train's device for this worker with trainer.gpus_per_worker > 0, else the CPU;
    on a GPU, deterministic kernels (exact resume needs them)."""
    if not trainer.gpus_per_worker > 0:
        return torch.device("cpu")
    from ray.train.torch import get_device

    device = get_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True, warn_only=True)
    return device


def resolve_autocast(mode: str, device: torch.device) -> str:
    """trainer.autocast as this worker applies it: ``auto`` is bf16 on a GPU that has it."""
    if mode != "auto":
        return mode
    return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "none"


def to_device(batch: Any, device: torch.device) -> Any:
    """A batch's tensors (in tuples, lists and dicts) moved to ``device``."""
    if device.type == "cpu":
        return batch
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        moved = [to_device(v, device) for v in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch


def elastic_share(world: int, workers: int, accum: int) -> float:
    """What one micro-batch's loss is scaled by in a world of ``world`` workers training
    ``workers`` logical shards of ``accum`` micro-batches each: DDP's mean over the
    ``world`` ranks is then the mean over all ``workers * accum`` micro-batches."""
    return world / (workers * accum)


def saved_worlds(extra: dict[str, Any], workers: int) -> tuple[int, int]:
    """A checkpoint's (world size, logical world) from its manifest's extra. One written
    before elastic worlds has no ``workers``: its world was its logical world."""
    world = int(extra.get("world_size", workers))
    return world, int(extra.get("workers", world))


def rng_file(rank: int, saved_world: int, saved: set[str]) -> str:
    """The RNG state rank ``rank`` restores: its own when the checkpoint has it; after a
    change of world size the state of rank ``rank % saved_world`` stands in (so a grown
    world's new ranks start from a saved rank's state, deterministically)."""
    own = f"rng-rank{rank}.pt"
    return own if own in saved else f"rng-rank{rank % max(1, saved_world)}.pt"


def train_func(config: dict[str, Any]) -> None:
    """What every Ray Train worker runs for a workload class (job.workload)."""
    run_worker(config, _Loop)


class _Loop(WorkerAttempt):
    def __init__(self, spec: RuntimeSpec, rank: int, world: int, control: ControlChannel) -> None:
        super().__init__(spec, rank, world, control)
        # The step in progress (0 before the first): a user error names it.
        self.user_step = 0
        # The micro-batch in progress, and whether a user error raised there was raised
        # again when that micro-batch was run once more (``raises_again``): a bug, then.
        self._micro = 0
        self.user_error_repeats = False
        trainer = spec.trainer
        torch.set_num_threads(trainer.torch_threads)
        self.device = worker_device(trainer)
        self.accum = trainer.grad_accum_steps
        # The logical world: the global batch, the data's shards and the checkpoints' L.
        self.workers = trainer.workers
        lowest = min_world(trainer.workers, trainer.min_workers)
        if not lowest <= world <= trainer.workers:
            raise ValueError(
                f"Ray Train started {world} workers; this run trains with trainer.min_workers ({lowest}) "
                f"to trainer.workers ({trainer.workers})"
            )
        self.clip = trainer.grad_clip_norm
        self.autocast = resolve_autocast(trainer.autocast, self.device)
        self._build(world)
        self.stalls: list[float] = []  # seconds each save blocked the loop
        # Rank 0: whether the other ranks put shares of checkpoints (see save).
        self._sharing = True
        # With survivors kept (orchestrator/runtime/group/rendezvous.py): this rank's way back into
        # the group after a lost peer, which holds its newest checkpoints' bytes.
        self.group = self._group_recovery()
        self.held = self.group.held if self.group is not None else None

    def _group_recovery(self) -> GroupRecovery | None:
        """The helper that brings this rank back into the group, where it joined one through
        the driver's rendezvous (survivors kept); None where a lost peer restarts the group."""
        if self.member is None:
            return None
        stores = [self.store, *self.fallbacks]
        return GroupRecovery(
            self.spec,
            self.control,
            self.rank,
            self.member,
            stores,
            lambda: restore_rule(self.spec, self.control, stores),
        )

    def _build(self, world: int) -> None:
        """The workload, its data, model, optimizer and scheduler, from the seed: what a
        fresh process builds, and a survivor again when no checkpoint was committed yet."""
        from orchestrator.workloads import make_workload

        spec, trainer = self.spec, self.spec.trainer
        seed = spec.job.seed
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed)
        self.workload = make_workload(spec.job.to_plain(), spec.data.to_plain())
        # The data loader (data.loader, or the workload's dataset()) and this worker's telemetry.
        self.data = WorkerData(spec.data, spec.job, self.workload, self.rank, world, self.accum, self.workers)
        self.model = self.workload.model().to(self.device)
        # trainer.strategy=fsdp shards the model in place before its optimizer is made, so
        # the optimizer holds (and steps) the shards.
        self.fsdp = trainer.strategy == "fsdp"
        if self.fsdp or trainer.activation_checkpointing == "units":
            try:
                units = shard_units(self.workload, self.model)
            except ShardUnitError as exc:
                raise UserCodeError(f"job.workload: {exc}") from None
            if trainer.activation_checkpointing == "units":
                checkpoint_activations(units)
            if self.fsdp:
                formed = self.member.wait_formed if self.member is not None else None
                shard(self.model, units, trainer.fsdp, self.device, world, group_formed=formed)
        self.optimizer = self.workload.optimizer(self.model)
        make_scheduler = getattr(self.workload, "scheduler", None)
        self.scheduler = make_scheduler(self.optimizer) if callable(make_scheduler) else None
        self.scaler = torch.amp.GradScaler(self.device.type) if self.autocast == "fp16" else None

    # --- checkpoints ------------------------------------------------------------
    def save(self, step: int) -> None:
        """Snapshot now, timed: how long a checkpoint blocks the loop (rank 0's time; the
        other ranks meet it in the snapshot's gather) is ``checkpoint_stall_s`` in the result."""
        t0 = time.perf_counter()
        self._snapshot(step)
        self.stalls.append(time.perf_counter() - t0)
        self.note_stall(self.stalls[-1])

    def _snapshot(self, step: int) -> None:
        """Snapshot now (all ranks), upload in the background: rank 0 commits, and with
        more than one rank each puts its share of the files (see checkpoint/share_plan.py)."""

        if self.fsdp:
            self._snapshot_sharded(step)
            return
        # What DDP keeps the same on every rank, so any rank may put it; the rest (the
        # data position, the workload's own state, the RNG states) is rank 0's alone.
        parts = self.parts()
        same = [n for n in SAME_ON_EVERY_RANK if n in parts] if self.world > 1 and not self.fsdp else []
        if self.fsdp and self.rank != 0:
            # Gathering a sharded state is a collective: every rank takes part, rank 0 keeps it.
            for n in ("model", "optimizer"):
                parts[n].state_dict()
        files = {f"{n}.pt": _dumps(parts[n].state_dict()) for n in (parts if self.rank == 0 else same)}
        # The last step's manifest carries the weights' digest: what the controller proves
        # the run's result from, signed, rather than what final.json claims. A sharded
        # model's digest is a collective too.
        last_step = step == self.spec.job.steps
        digest = weights_sha256(self.model.state_dict()) if last_step and (self.rank == 0 or self.fsdp) else None
        # Rank 0 decides who puts what, with the sha256 of its bytes of each file another
        # rank puts: that rank puts a file only if its own bytes are the same.
        shares: dict[str, tuple[int, str]] = {}
        if self.rank == 0 and same and self._sharing:
            owner = assign_shares({f"{n}.pt": len(files[f"{n}.pt"]) for n in same}, self.world)
            others = [n for n, r in owner.items() if r != 0]
            shares = {n: (owner[n], d) for n, d in sha256_all(files, others).items()}
        # Each rank also says whether its last share had bytes other than rank 0's.
        diverged = self.share_upload is not None and "other_bytes" in self.share_upload.last.values()
        gathered = self._gather((_dumps(rng_state(self.device)), shares, diverged))
        shares = gathered[0][1]
        if self.rank == 0 and self._sharing and any(got[2] for got in gathered):
            # Serialized bytes that differ by rank (say, tensors on cuda:1 against cuda:0)
            # would make rank 0 wait at every checkpoint for files that never come.
            self._sharing = False
            ranks = [r for r, got in enumerate(gathered) if got[2]]
            self.control.event(self.gen, "upload_shared", step=step, stopped=f"ranks {ranks} serialize other bytes")
        if self.rank != 0:
            if self.share_upload is not None:
                share = {n: files[n] for n, (r, _) in shares.items() if r == self.rank and n in files}
                self.share_upload.submit(step, share, {n: shares[n][1] for n in share})
            if self.held is not None:
                # What a replacement may need of this checkpoint: every rank's RNG came with
                # the gather, and the position is the same on every rank.
                rngs = {f"rng-rank{r}.pt": got[0] for r, got in enumerate(gathered)}
                self.held.hold(step, files | rngs | {"state.pt": self._state_bytes(step)})
            return
        files |= self._rank0_state(step, [got[0] for got in gathered])
        if self.held is not None:
            self.held.hold(step, files)
        last = {"weights_sha256": digest} if digest is not None else {}
        # A DDP checkpoint's extra stays as it was: no strategy is ddp.
        strategy = {"strategy": "fsdp"} if self.fsdp else {}
        self.checkpointer.submit(
            step,
            files,
            extra={"world_size": self.world, "workers": self.workers, **strategy, **last},
            shares={n: r for n, (r, _) in shares.items()},
            digests={n: d for n, (_, d) in shares.items()},
        )
        if not self.spec.checkpoint.async_upload:
            self.checkpointer.wait()

    def _gather(self, mine: Any) -> list[Any]:
        """Every rank's ``mine`` (a checkpoint's small parts), in rank order; the data
        loader's telemetry is gathered too, since the ranks meet here anyway."""
        gathered = self.every_ranks(mine)
        self.data.gather_telemetry()
        return gathered

    def _rank0_state(self, step: int, rngs: list[bytes]) -> dict[str, bytes]:
        """What rank 0 adds to any checkpoint: every rank's RNG states and the loop's position."""
        files = {f"rng-rank{r}.pt": rng for r, rng in enumerate(rngs)}
        files["state.pt"] = self._state_bytes(step)
        if self._upload_fault_armed():
            self._upload_staged.clear()
        return files

    def _state_bytes(self, step: int) -> bytes:
        """The loop's position after ``step``: ``state.pt``."""
        return _dumps(
            {
                "step": step,
                "data_position": step,
                "data": self.data.position(step).to_json(),
                "world_size": self.world,
                "workers": self.workers,
            }
        )

    def _snapshot_sharded(self, step: int) -> None:
        """A sharded checkpoint (all ranks): each rank serialises its own shards of the
        model and optimizer into one file and puts it; rank 0 adds the index, the rest of
        the state and the RNG states, and commits once every rank's file is in the store
        at the size that rank reported, listed with its sha256 (see checkpoint/rank0_upload.py)."""

        tensors, described, rest = save_shards(self.model, self.optimizer, self.rank, self.world)
        name = shard_file(self.rank)
        # Serialised to the node's disk and hashed as it is written (checkpoint/spill.py):
        # the shard is never held twice, and its bytes are then page cache, not the rank's.
        spilled = spill(tensors, self.spec.scratch_dir)
        del tensors
        own: dict[str, Any] = {name: spilled.data}
        sha = spilled.sha256
        last_step = step == self.spec.job.steps
        digest = weights_sha256(self.model.state_dict()) if last_step else None  # a collective
        index = self.checkpointer.store_index if self.rank == 0 else 0
        gathered = self._gather((_dumps(rng_state(self.device)), name, len(own[name]), sha, described, index))
        if self.rank != 0:
            self.share_to(gathered[0][5])  # where rank 0 commits now
            if self.share_upload is not None:
                self.share_upload.submit(step, own, {name: sha}, own=True)
            if self.held is not None:
                # A survivor loads its own shards from here (the bytes it puts anyway), and
                # every rank's RNG and the position came with the gather.
                rngs = {f"rng-rank{r}.pt": got[0] for r, got in enumerate(gathered)}
                self.held.hold(step, own | rngs | {"state.pt": self._state_bytes(step)})
            return
        parts = {n: p for n, p in self.parts().items() if n not in ("model", "optimizer")}
        files = {f"{n}.pt": _dumps(p.state_dict()) for n, p in parts.items()}
        files |= own
        files[INDEX_NAME] = build_index(self.world, [got[4] for got in gathered]).to_json()
        files[REST_NAME] = _dumps(rest)
        files |= self._rank0_state(step, [got[0] for got in gathered])
        if self.held is not None:
            self.held.hold(step, files)
        last = {"weights_sha256": digest} if digest is not None else {}
        self.checkpointer.submit(
            step,
            files,
            extra={"world_size": self.world, "workers": self.workers, "strategy": "fsdp", **last},
            digests={name: sha},  # its own shard's, taken above: not hashed again
            remote={got[1]: (r, got[2], got[3]) for r, got in enumerate(gathered) if r != 0},
            store_index=index,
        )
        if not self.spec.checkpoint.async_upload:
            self.checkpointer.wait()

    def parts(self) -> dict[str, Stateful]:
        """What a checkpoint holds besides the RNG states and the data position, by name
        (``<name>.pt``): saved and loaded through state_dict / load_state_dict alone."""
        parts: dict[str, Stateful] = {"model": self.model, "optimizer": self.optimizer}
        if self.fsdp:
            # Whole state dicts: what an fsdp checkpoint held before it was sharded (read only;
            # _snapshot_sharded writes each rank's shards and leaves these two out).
            parts = {"model": FullModel(self.model), "optimizer": FullOptimizer(self.model, self.optimizer)}
        if self.scheduler is not None:
            parts["scheduler"] = self.scheduler
        if self.scaler is not None:
            parts["grad_scaler"] = self.scaler
        if callable(getattr(self.workload, "state_dict", None)) and callable(
            getattr(self.workload, "load_state_dict", None)
        ):
            parts["workload"] = self.workload
        return parts

    def restore(self) -> int:
        """Load the newest checkpoint that verifies; the step to continue after (0: none).
        Every rank reads (and so verifies) its files before any loads them: a rank whose
        files fail sends the whole group to the next checkpoint before a collective load."""
        self.restore_clock = RestoreClock()
        agreed = self.restore_agreed(self._read_restore, drop=_close_shards)
        if agreed is None:
            return 0
        source, m, (files, shards) = agreed
        return self.load_files(source, m, files, shards)

    def _read_restore(self, source: Any, m: Any) -> tuple[dict[str, bytes], ShardFiles | None]:
        """This rank's verified files of checkpoint ``m`` (rank 0 kept its own while choosing)
        and, for a sharded checkpoint, the saved ranks' shards it needs, loaded."""
        _, saved_workers = saved_worlds(m.extra, self.workers)
        if saved_workers != self.workers:
            raise UserCodeError(
                f"checkpoint step {m.step} was written by a run of trainer.workers={saved_workers}, this run has "
                f"{self.workers}; resume it with trainer.workers={saved_workers} (trainer.min_workers lets fewer "
                "workers train it)"
            )
        saved_strategy = str(m.extra.get("strategy", "ddp"))
        if saved_strategy != self.spec.trainer.strategy:
            raise UserCodeError(
                f"checkpoint step {m.step} was written by a run of trainer.strategy={saved_strategy}, this run has "
                f"trainer.strategy={self.spec.trainer.strategy}; resume it with trainer.strategy={saved_strategy}"
            )
        saved = {f.name for f in m.files}
        files = self._verified
        self._verified = {}
        # A sharded checkpoint (shards.json): the model and optimizer from the ranks' files.
        sharded = self.fsdp and INDEX_NAME in saved
        wanted = self.files_to_load(m, self.rank) + ([INDEX_NAME, REST_NAME] if sharded else [])
        missing = [name for name in wanted if name in saved and name not in files]
        if missing:
            files = files | self.restore_clock.read(lambda: source.read_many(m, missing))
        return files, (self._read_shards(source, m, files[INDEX_NAME]) if sharded else None)

    def files_to_load(self, m: Any, rank: int) -> list[str]:
        """The files of checkpoint ``m`` that ``rank`` loads (a sharded model's apart)."""
        saved = {f.name for f in m.files}
        saved_world, _ = saved_worlds(m.extra, self.workers)
        parts = self.parts()
        if self.fsdp and INDEX_NAME in saved:
            parts = {n: p for n, p in parts.items() if n not in ("model", "optimizer")}
        return [f"{name}.pt" for name in parts] + ["state.pt", rng_file(rank, saved_world, saved)]

    def _sharded(self, m: Any) -> bool:
        return self.fsdp and INDEX_NAME in {f.name for f in m.files}

    def peer_files(self, m: Any, rank: int) -> list[str]:
        """The files of checkpoint ``m`` that ``rank`` takes from memory or its peers in a
        group formed around survivors: those it loads and, of a sharded checkpoint, its
        index and rest and, at the world it was written at, the rank's own shards file
        (no peer holds another's: a replacement's is streamed from the store)."""
        names = self.files_to_load(m, rank)
        if not self._sharded(m):
            return names
        saved_world, _ = saved_worlds(m.extra, self.workers)
        return names + [INDEX_NAME, REST_NAME] + ([shard_file(rank)] if saved_world == self.world else [])

    def read_streamed(self, source: Any, m: Any, files: dict[str, bytes]) -> ShardFiles | None:
        """A sharded checkpoint's rank files this rank loads and was not handed (a
        replacement's own), streamed from ``source`` and verified now; the others (a
        survivor's own, in ``files``) taken from there. None for an unsharded one."""
        if not self._sharded(m):
            return None
        index = (
            files[INDEX_NAME] if INDEX_NAME in files else self.restore_clock.read(lambda: source.read(m, INDEX_NAME))
        )
        return self._read_shards(source, m, index, held=files)

    def streamed_files(self, m: Any) -> set[str]:
        """What ``load_files`` streams from the store itself when it is not handed the
        bytes: a sharded checkpoint's rank files (to the node's disk, never whole in memory)."""
        return {f.name for f in m.files if f.name.startswith("shard-r")} if self._sharded(m) else set()

    def load_files(self, source: Any, m: Any, files: dict[str, bytes], shards: ShardFiles | None = None) -> int:
        """Load checkpoint ``m`` from ``files`` (verified bytes; any other file is read from
        ``source`` and verified) and a sharded one's ``shards`` (read here when not given);
        the step to continue after."""
        saved = {f.name for f in m.files}
        saved_world, _ = saved_worlds(m.extra, self.workers)
        sharded = self.fsdp and INDEX_NAME in saved
        parts = self.parts()
        if sharded:
            parts = {n: p for n, p in parts.items() if n not in ("model", "optimizer")}

        clock = self.restore_clock

        def read(name: str) -> bytes:
            return files[name] if name in files else clock.read(lambda: source.read(m, name))

        def loads(name: str) -> Any:
            data = read(name)
            with clock.timing("deserialize_s"):
                return _loads(data)

        if sharded:
            if shards is None:
                shards = self._read_shards(source, m, read(INDEX_NAME))
            try:
                self._load_sharded(m, read, loads, shards.loaded)
            finally:
                shards.close()
        for name, part in parts.items():
            if f"{name}.pt" not in saved:
                raise UserCodeError(
                    f"checkpoint step {m.step} holds no {name} state, which this run has "
                    f"({', '.join(sorted(saved))}); an exact resume needs the same workload and trainer options"
                )
            saved_part = loads(f"{name}.pt")
            with clock.timing("copy_in_s"):
                part.load_state_dict(saved_part)
        rng = loads(rng_file(self.rank, saved_world, saved))
        with clock.timing("copy_in_s"):
            set_rng_state(rng, self.device)
        state = loads("state.pt")
        try:
            self.data.check_restored(state, int(state["data_position"]))
        except DataMismatch as exc:
            raise UserCodeError(f"checkpoint step {m.step}: {exc}") from None
        self._restored_url = source.checkpoint_url(self.spec.run_id, m.step)
        if self.held is not None and not sharded:
            # What it loaded, it holds: a rank lost before the next checkpoint is served from here.
            self.held.hold(m.step, {name: files[name] for name in self.files_to_load(m, self.rank) if name in files})
        return int(state["data_position"])

    def _read_shards(self, source: Any, m: Any, index_bytes: bytes, held: dict[str, bytes] | None = None) -> ShardFiles:
        """The saved ranks' files this rank needs of a sharded checkpoint: only those that
        hold rows it now holds (its own at the same world size), each streamed to the node's
        disk, verified against the signed manifest as it arrives, and mapped (shard_restore);
        one in ``held`` (verified bytes: a survivor's own, from its memory) loaded from there."""
        index = self._index(m, index_bytes)
        needed = files_needed(index, self.world, self.rank)
        kept = [name for name in needed if name in (held or {})]
        try:
            shards = read_shards(source, m, needed, self.restore_clock, self.spec.scratch_dir, held)
        except ShardFileError as exc:
            raise UserCodeError(f"checkpoint step {m.step}: {exc}") from None
        # The journal says which rank files each rank read (the acceptance: only its own),
        # and which of them it had in memory (a survivor's own).
        self.control.event(
            self.gen,
            "restore_shards",
            step=m.step,
            rank=self.rank,
            saved_world=index.world,
            read=needed,
            from_memory=kept,
        )
        return shards

    def _index(self, m: Any, index_bytes: bytes) -> Any:
        try:
            return parse_index(index_bytes)
        except ShardIndexError as exc:
            raise UserCodeError(f"checkpoint step {m.step}: {exc}") from None

    def _load_sharded(self, m: Any, read: Any, loads: Any, loaded: dict[int, Any]) -> None:
        """This rank's shards of a sharded checkpoint, from ``loaded`` (``_read_shards``),
        resharded when the world size changed. A collective: every rank calls it."""
        index = self._index(m, read(INDEX_NAME))
        rest = loads(REST_NAME)
        try:
            with self.restore_clock.timing("copy_in_s"):
                load_shards(self.model, self.optimizer, index, self.rank, self.world, lambda r: loaded.get(r, {}), rest)
        except ValueError as exc:
            raise UserCodeError(f"checkpoint step {m.step}: {exc}; an exact resume needs the same model") from None

    # --- chaos --------------------------------------------------------------------
    def chaos_hook(self, step: int) -> None:
        total = self.spec.job.steps
        due = [i for i, fault in enumerate(self.spec.faults) if due_at_step(fault, step, total)]
        if not due:
            return
        self.quiesce()
        for i in due:
            fault = self.spec.faults[i]
            if fault.kind == FaultKind.corrupt_peer_state:
                self._corrupt_held(i, fault, step)
            else:
                self.strike(i, step)

    def _corrupt_held(self, i: int, fault: Any, step: int) -> None:
        """chaos corrupt_peer_state: every rank flips a byte of the model it holds for its
        newest checkpoints (each decides before rank 0 has the fault marked fired)."""
        armed = self._armed(i, fault) and not (fault.random is not None and step in self.control.fired_steps(i))
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()
        if not armed:
            return
        if self.held is not None:
            self.held.corrupt()
        if self.rank == 0:
            self._rendezvous(i, fault, step)

    def worker_places(self) -> tuple[list[int], list[int] | None]:
        """Every rank's process id and node index, in rank order (a collective: every rank
        calls it); the indexes None where a node is unlabelled (orchestrator/runtime/group/node_label.py).
        Journaled with ``train_started``: a recovery that kept a survivor's process shows
        its pid again, one that restarted the world shows new ones."""
        if self.world == 1:
            return [os.getpid()], known([my_node()])
        import torch.distributed as dist

        mine = torch.tensor([os.getpid(), my_node()], dtype=torch.int64, device=self.device)
        every = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(every, mine)
        return [int(t[0].item()) for t in every], known([int(t[1].item()) for t in every])

    # --- preemption -----------------------------------------------------------------
    def preempt_agreed(self, step: int) -> bool:
        """Every PREEMPT_CHECK_EVERY steps, all ranks learn whether rank 0 saw a notice."""
        if step % PREEMPT_CHECK_EVERY != 0:
            return False
        if self.world == 1:
            return self._preempt.is_set()
        import torch.distributed as dist

        flag = torch.tensor([1 if self._preempt.is_set() else 0], dtype=torch.int64, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def on_preempt(self, step: int) -> None:
        """Checkpoint this very step, commit it, and stop: nothing is lost."""
        self.save(step)
        if self.rank == 0:
            self.flush_losses()
            self.checkpointer.wait()
            self.control.progress(
                self.gen,
                step=step,
                total=self.spec.job.steps,
                last_checkpoint=self.last_checkpoint,
                world_size=self.world,
            )
            self.control.event(self.gen, "preempted", step=step, checkpoint=self.last_checkpoint)
        raise Preempted(step)

    # --- the loop -------------------------------------------------------------------
    def run(self, wrap: Any = None) -> None:
        """``wrap`` puts the model in DDP (Ray Train's prepare_model unless a test says otherwise)."""
        self.guarded(lambda: self._run(wrap))

    def _run(self, wrap: Any) -> None:
        if wrap is None:
            from ray.train.torch import prepare_model

            from orchestrator.runtime.loop.ddp import ddp_options

            def wrap(model: torch.nn.Module) -> torch.nn.Module:
                return prepare_model(model, move_to_device=False, parallel_strategy_kwargs=ddp_options(self.world))

        restored: int | None = None
        broken: Exception | None = None
        while True:
            try:
                if broken is not None:
                    # The survivors stay: out of the broken group, into the next one.
                    restored, broken = self.rejoin(broken), None
                elif restored is None:
                    restored = self.begin(first=True)
                self._train(wrap, restored)
                break
            except Exception as exc:
                if self.group is None or not is_comm_failure(exc):
                    raise
                broken = exc  # also one met while re-forming: the group forms again
                # Its frames hold the DDP wrapper, which holds the broken group: released, the
                # group's connections close when this rank leaves, and the peers still blocked
                # on this rank fail at once rather than at the collective's timeout.
                release_frames(exc)
        # A sharded model's evaluation and digest are collectives: every rank takes part.
        outcome = self.outcome() if self.fsdp else None
        if self.rank == 0:
            self.finish(self.spec.job.steps, self._t_start, self._first_step, outcome)

    # --- survivors: the loop's side of group.survivors.GroupRecovery (a Restorable) --------
    def rejoin(self, exc: BaseException) -> int:
        """Out of the broken group and into the next epoch's; the step restored there."""
        assert self.group is not None, "only a rank that joined through the driver's rendezvous rejoins"
        self.world = self.group.rejoin(exc, self.user_step, self._settle_uploads)
        if self.fsdp:
            # A sharded model lives on the broken group's device mesh: it is built again on
            # the new group, as a new process builds it, then loaded below (its own shards
            # from this rank's memory).
            self._build(self.world)
        return self.begin(first=False)

    def _settle_uploads(self) -> None:
        """Until what this rank handed over is committed (rank 0) or put (its share)."""
        if self.rank == 0:
            self.checkpointer.wait()
        self.wait_for_share()

    def start_from_seed(self) -> None:
        self._build(self.world)

    def before_restore(self, step: int) -> None:
        self._restore_hook(step)

    def begin(self, first: bool) -> int:
        """(All ranks.) The world's pids, the restore (from the store, or from peers when
        the group formed again around survivors), ``train_started``; the step restored."""
        pids, nodes = self.worker_places()
        joined = self.group is not None and self.group.joining
        if first and not joined:
            if self.rank == 0:
                self.control.event(self.gen, "workers_ready", pid=os.getpid(), standby=self.spec.standby)
            self.wait_until_active()
        called = time.monotonic()
        restored = self.group.peer_restore(self.world, self) if self.group is not None and joined else self.restore()
        if self.rank == 0:
            group = {"epoch": self.group.epoch} if self.group is not None else {}
            self.control.event(
                self.gen,
                "train_started",
                restored_step=restored,
                restored_from=self._restored_url,
                # The choice and the load on every rank, overlap counted once; rank 0's phases.
                restore_s=round(self.restore_work_s(called, time.monotonic()), 4) if restored else None,
                restore_phases=self.restore_clock.fields(self.choice_s()) if restored else None,
                pid=os.getpid(),
                device=str(self.device),
                world_size=self.world,
                workers=self.workers,
                worker_pids=pids,
                worker_nodes=nodes,
                **group,
            )
        return restored

    def _train(self, wrap: Any, restored: int) -> None:
        # A sharded model is its own wrapper: FSDP2 reduces its gradients.
        ddp = self.model if self.fsdp else wrap(self.model)
        total = self.spec.job.steps
        interval = self.spec.checkpoint.interval_steps
        last_report = 0.0
        t_start, first_step = time.time(), restored + 1
        self._t_start, self._first_step = t_start, first_step
        loss_value = float("nan")
        resumed_at = None
        for step in range(restored + 1, total + 1):
            self.user_step = step
            self.hold_for_upload_fault()
            try:
                loss = self.train_step(ddp, step)
            except Exception as exc:
                self.user_error_repeats = self.raises_again(exc, step)
                raise
            now = time.time()
            resumed_at = now if resumed_at is None else resumed_at
            if self.rank == 0 and step % LOSS_EVERY == 0:
                self._losses.append((step, float(loss.item())))
            if self.rank == 0 and (now - last_report >= PROGRESS_EVERY_S or step == restored + 1):
                loss_value = float(loss.item())
                rate = (step - first_step + 1) / max(now - t_start, 1e-9)
                self.control.progress(
                    self.gen,
                    step=step,
                    total=total,
                    loss=loss_value,
                    steps_per_s=rate,
                    last_checkpoint=self.last_checkpoint,
                    restored_step=restored,
                    resumed_at=resumed_at,
                    telemetry=self.data.telemetry,
                    world_size=self.world,
                )
                self.flush_losses()
                last_report = now
            self.chaos_hook(step)
            if step < total and self.preempt_agreed(step):
                self.on_preempt(step)
            if step % interval == 0 or step == total:
                self.save(step)

    def train_step(self, ddp: torch.nn.Module, step: int) -> torch.Tensor:
        """One optimizer step over ``grad_accum_steps`` micro-batches per logical shard this
        worker trains: autocast around the forward pass, clipping by total norm, the fp16
        scaler, then the scheduler. Returns the step's loss (the mean over this worker's
        micro-batches)."""
        self.optimizer.zero_grad(set_to_none=True)
        total: torch.Tensor | None = None
        micros = self.data.micro_batches
        # Below the full world a worker trains several shards: each micro-batch's share of the
        # mean over all L * accum of them, times w, since DDP divides the sum of w ranks by w.
        # At w == L the fixed-world arithmetic stays as it was, bit for bit.
        elastic = self.world != self.workers
        share = elastic_share(self.world, self.workers, self.accum)
        for micro in range(micros):
            self._micro = micro
            batch = to_device(self.data.batch(step, micro), self.device)
            # DDP all-reduces gradients on the last micro-batch only.
            last = micro == micros - 1 or not hasattr(ddp, "no_sync")
            with contextlib.nullcontext() if last else ddp.no_sync():
                with self._autocast():
                    loss = self.workload.loss(ddp, batch)
                if elastic:
                    scaled = loss * share
                    loss = loss.detach() / micros  # reported: this worker's mean
                elif self.accum > 1:
                    scaled = loss = loss / self.accum
                else:
                    scaled = loss
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            total = loss.detach() if total is None else total + loss.detach()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        assert total is not None
        return total

    def raises_again(self, exc: BaseException, step: int) -> bool:
        """Whether the user's code raises ``exc`` again (same type, same message) when the
        micro-batch it was raised in is made and its loss taken once more, on the model as
        it stands, in this process: a deterministic bug, which a restart would only meet
        again at the same step (training here is exact), so the run need not launch again
        to learn it. Only where that replay cannot block or mislead: a batch that is a
        function of the step (not a Ray Data stream), and the bare model (no collective;
        not FSDP, whose forward gathers across ranks). What the replay changes is thrown
        away with the attempt."""
        if self.fsdp or not self.data.replayable or is_infra_error(exc):
            return False
        try:
            batch = to_device(self.data.batch(step, self._micro), self.device)
            with self._autocast():
                self.workload.loss(self.model, batch)
        except Exception as again:
            return type(again) is type(exc) and str(again) == str(exc)
        return False

    def _autocast(self) -> Any:
        if self.autocast == "none":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.autocast == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def outcome(self) -> tuple[dict[str, Any], str]:
        """The trained model's metrics (the workload's evaluate()) and weights_sha256."""
        evaluate = getattr(self.workload, "evaluate", None)
        metrics = evaluate(self.model) if callable(evaluate) else {}
        return metrics, weights_sha256(self.model.state_dict())

    def finish(
        self, total: int, t_start: float, first_step: int, outcome: tuple[dict[str, Any], str] | None = None
    ) -> None:
        self.flush_losses()
        elapsed = max(time.time() - t_start, 1e-9)
        self.checkpointer.wait()  # the final checkpoint is committed before the result says so
        metrics, digest = outcome if outcome is not None else self.outcome()
        self.control.progress(
            self.gen,
            step=total,
            total=total,
            steps_per_s=(total - first_step + 1) / elapsed,
            last_checkpoint=self.last_checkpoint,
            telemetry=self.data.telemetry,
            world_size=self.world,
        )
        self.control.final(
            self.gen,
            final_step=total,
            metrics=metrics,
            weights_sha256=digest,
            final_checkpoint=self.last_checkpoint,
            train_steps_per_s=(total - first_step + 1) / elapsed,
            checkpoint_stall_s=statistics.median(self.stalls) if self.stalls else None,
            state_bytes=local_state_bytes(self.model, self.optimizer),
            world_size=self.world,
            # Gathered from every rank at the final checkpoint.
            telemetry=self.data.telemetry,
        )
