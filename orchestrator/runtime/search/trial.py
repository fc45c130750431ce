"""One trial of a search: the job's workload trained in a Tune trial, from its checkpoint.

The search's trials are listed up front from the run's config (hpo.sample_configs), so
that a trial is the same trial, with the same id (``trial_00003``) and values, in every
attempt. Tune runs them as a grid over their indexes (``INDEX``); a trial looks its
values up by index.
"""

from __future__ import annotations

import io
import math
import os
import random
import tempfile
from typing import Any

import numpy as np
import torch

from orchestrator.hpo import trial_key
from orchestrator.hpo.space import apply_values, config_path
from orchestrator.runtime.loop.dataflow import WorkerData
from orchestrator.runtime.loop.train_loop import rng_state, set_rng_state, to_device
from orchestrator.runtime.loop.weights import weights_sha256
from orchestrator.runtime.loop.worker import UserCodeError
from orchestrator.runtime.search.snapshot import (
    CHECKPOINT_FILES,
    FUNC_FILES,
    FUNC_STATE,
    MAX_FUNC_STATE_BYTES,
    MAX_METRICS,
    METRICS_KEY,
    RNG_FILE,
    func_iteration,
    func_parts,
)
from orchestrator.wire import runkey
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.sections import METRIC_NAME, DataSection, HpoSection, JobSection, TrainerSection
from orchestrator.wire.spec import RuntimeSpec

# A Tune trial's config: the trial's index in the search's list of trials, and (for a
# trial a searcher proposed, which a trial's process cannot look up) its values.
INDEX = "trial_index"
VALUES = "trial_values"


def trial_id_of(trial: Any) -> str:
    """A Tune trial's id in this search (``trial_00003``), from its index."""
    return trial_key(int(trial.config[INDEX]))


def load_tensors(data: bytes) -> Any:
    """A checkpoint file of a trial: tensors and plain data only, never a pickle (on the
    CPU: a GPU trial's state goes to its device as it is loaded into the model)."""
    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


def read_trial_checkpoint(path: str) -> dict[str, bytes]:
    """A trial's checkpoint folder as Tune keeps it: each of CHECKPOINT_FILES, and each
    rank's RNG file of a multi-worker trial, by name; a train function's trial: FUNC_STATE
    and its folder's files under FUNC_FILES (orchestrator.runtime.search.func_trial)."""
    if os.path.exists(os.path.join(path, FUNC_STATE)):
        from orchestrator.runtime.loop.func_mode import read_checkpoint_dir

        with open(os.path.join(path, FUNC_STATE), "rb") as fh:
            iteration = func_iteration({FUNC_STATE: fh.read(MAX_FUNC_STATE_BYTES + 1)})
        return func_parts(iteration, read_checkpoint_dir(os.path.join(path, FUNC_FILES)))
    names = [*CHECKPOINT_FILES, *(n for n in sorted(os.listdir(path)) if RNG_FILE.fullmatch(n))]
    parts = {}
    for name in names:
        with open(os.path.join(path, name), "rb") as fh:
            parts[name] = fh.read()
    return parts


def trial_inputs(spec: RuntimeSpec, hpo: HpoSection, configs: list[dict[str, Any]]) -> dict[str, Any]:
    """What every trial gets besides its index (``trial_func``'s ``runtime``)."""
    return {
        "hpo": hpo,
        "job": spec.job,
        "trainer": spec.trainer,
        "data": spec.data,
        "configs": configs,
        "control_url": spec.control_url,
        "control_options": spec.control_options,
        "generation": spec.generation,
        # Where a multi-worker trial's Ray Train run keeps its folders (the cluster's scratch).
        "scratch": spec.ray_storage_path,
    }


def trial_sections(runtime: dict[str, Any], values: dict[str, Any]) -> tuple[JobSection, TrainerSection, DataSection]:
    """The run's job, trainer and data sections with the trial's values at their paths
    (checked before launch as a run's config: orchestrator.config.validate_search)."""
    plain = apply_values({name: runtime[name].to_plain() for name in ("job", "trainer", "data")}, values)
    return (
        JobSection.from_plain(plain["job"]),
        TrainerSection.from_plain(plain["trainer"]),
        DataSection.from_plain(plain["data"]),
    )


def scale_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """A searched job.lr for a workload class: every param group's rate scaled so that the
    first group's is ``lr`` (their ratios kept), before a scheduler reads them."""
    base = float(optimizer.param_groups[0]["lr"])
    for i, group in enumerate(optimizer.param_groups):
        group["lr"] = lr if i == 0 or base == 0 else float(group["lr"]) / base * lr


def eval_metrics(metrics: Any, wanted: str, source: str = "the workload's evaluate()") -> dict[str, float]:
    """The numbers of the workload's evaluate() (or ``source``), at most MAX_METRICS of
    them, named as a metric may be; UserCodeError when the search's metric is not among them."""
    out: dict[str, float] = {}
    for name, value in (metrics or {}).items() if isinstance(metrics, dict) else ():
        if isinstance(name, str) and METRIC_NAME.fullmatch(name) and isinstance(value, int | float | torch.Tensor):
            number = float(value)
            if math.isfinite(number) and len(out) < MAX_METRICS:
                out[name] = number
    if wanted not in out:
        raise UserCodeError(
            f"hpo.metric: the search optimises {wanted!r}, and {source} returned "
            f"{', '.join(sorted(out)) or 'no numbers'}: set hpo.metric to one of them"
        )
    return out


class TrialLoop:
    """One trial's training, Tune aside: the job's workload in this process (a world of
    one), the trial's values at their config paths, an evaluation and a checkpoint every
    ``hpo.steps_per_iteration`` steps. The step is the run loop's in a world of one
    (gradient accumulation, clipping, the workload's scheduler; see
    orchestrator.runtime.loop.train_loop), and a checkpoint carries everything a resumed trial
    needs to end with the weights of one never stopped: model, optimizer, scheduler, the
    workload's own state and the RNG states."""

    def __init__(
        self,
        runtime: dict[str, Any],
        index: int,
        values: dict[str, Any] | None = None,
        rank: int = 0,
        world: int = 1,
        device: torch.device | None = None,
    ) -> None:
        from orchestrator.workloads import is_builtin, make_workload

        self.hpo: HpoSection = runtime["hpo"]
        self.rank, self.world = rank, world
        self.trial_id = trial_key(index)
        self.values = runtime["configs"][index] if values is None else values
        job, trainer, data = trial_sections(runtime, self.values)
        self.clip = trainer.grad_clip_norm
        torch.set_num_threads(trainer.torch_threads)
        torch.manual_seed(job.seed)
        random.seed(job.seed)
        np.random.seed(job.seed)
        self.workload = make_workload(job.to_plain(), data.to_plain())
        self.feed = WorkerData(data, job, self.workload, rank, world, trainer.grad_accum_steps)
        self.device = device or torch.device("cpu")
        self.model = self.workload.model().to(self.device)
        # A multi-worker trial trains through DDP (the process group is Ray Train's); its
        # checkpoints hold the module's own state, as a world of one's do.
        self.net: Any = self.model
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel

            from orchestrator.runtime.loop.ddp import ddp_options

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = DistributedDataParallel(self.model, device_ids=ids, **ddp_options(world))
        self.optimizer = self.workload.optimizer(self.model)
        if any(config_path(k) == "job.lr" for k in self.values) and not is_builtin(job.workload):
            scale_lr(self.optimizer, job.lr)
        make_sched = getattr(self.workload, "scheduler", None)
        self.scheduler = make_sched(self.optimizer) if callable(make_sched) else None

    def restore(self, parts: dict[str, bytes]) -> int:
        """The state of a checkpoint this loop wrote (CHECKPOINT_FILES); its iteration.

        A checkpoint another trial wrote, with other values (PBT's exploit), gives the
        weights, the optimizer's state and the step; the hyperparameters are this trial's:
        each param group's (its learning rate among them) as this trial's optimizer was
        built, and the scheduler's base rates, its step count kept."""
        own = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
        base = None if self.scheduler is None else list(getattr(self.scheduler, "base_lrs", []) or [])
        self.model.load_state_dict(load_tensors(parts["model.pt"]))
        self.optimizer.load_state_dict(load_tensors(parts["optimizer.pt"]))
        state = load_tensors(parts["state.pt"])
        explored = state.get("values") is not None and state["values"] != self.values
        if explored:
            for group, hyper in zip(self.optimizer.param_groups, own, strict=True):
                group.update(hyper)
        if self.scheduler is not None and state.get("scheduler") is not None:
            saved = dict(state["scheduler"])
            if explored and base:
                saved["base_lrs"] = base
                saved["_last_lr"] = [g["lr"] for g in self.optimizer.param_groups]
            self.scheduler.load_state_dict(saved)
        if callable(getattr(self.workload, "load_state_dict", None)) and state.get("workload") is not None:
            self.workload.load_state_dict(state["workload"])
        own_rng = parts.get(f"rng-{self.rank}.pt") if self.world > 1 else None
        if own_rng is not None:
            set_rng_state(load_tensors(own_rng))
        elif state.get("rng") is not None:
            set_rng_state(state["rng"])
        return int(state["iteration"])

    def run(self, start: int, report: Any) -> None:
        """Iterations ``start + 1`` .. ``hpo.max_t``: each one's metrics and checkpoint folder to
        ``report(iteration, metrics, folder)`` (the folder is gone once it returns)."""
        spi = self.hpo.steps_per_iteration
        try:
            if start >= self.hpo.max_t:
                # Restored at its last iteration (PBT took a finished donor's checkpoint, or the
                # trial was lost between its last checkpoint and its end): nothing to train. It
                # reports where it stands, that checkpoint evaluated, as it would have had it
                # run on, so Tune, the records and the snapshot agree on its iteration.
                self._report(start, report)
                return
            for it in range(start + 1, self.hpo.max_t + 1):
                # Steps (it-1)*spi+1 .. it*spi: the data position is the iteration.
                for step in range((it - 1) * spi + 1, it * spi + 1):
                    train_step(
                        self.workload, self.net, self.optimizer, self.scheduler, self.feed, step, self.clip, self.device
                    )
                self._report(it, report)
        finally:
            self.feed.close()

    def _report(self, it: int, report: Any) -> None:
        # Every rank holds the same weights: rank 0 evaluates for the trial.
        metrics = eval_metrics(self.workload.evaluate(self.model), self.hpo.metric) if self.rank == 0 else {}
        with tempfile.TemporaryDirectory(prefix="trial-ckpt-") as d:
            self.save(d, it)
            report(it, metrics, d)

    def save(self, folder: str, iteration: int) -> None:
        """This rank's part of the checkpoint: rank 0 the trial's state, and each rank of a
        multi-worker trial its RNG states (the checkpoint is every rank's files together)."""
        if self.world > 1:
            torch.save(rng_state(), os.path.join(folder, f"rng-{self.rank}.pt"))
        if self.rank != 0:
            return
        torch.save(self.model.state_dict(), os.path.join(folder, "model.pt"))
        torch.save(self.optimizer.state_dict(), os.path.join(folder, "optimizer.pt"))
        own = getattr(self.workload, "state_dict", None)
        state = {
            "iteration": iteration,
            "trial_id": self.trial_id,
            "data_position": iteration * self.hpo.steps_per_iteration,
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "workload": own() if callable(own) else None,
            "rng": rng_state(),
            # The values that trained it: a trial that takes it with others (PBT) knows.
            "values": dict(self.values),
        }
        torch.save(state, os.path.join(folder, "state.pt"))


def resumed_parts(trial_id: str, resume: dict[str, dict[str, bytes]]) -> dict[str, bytes] | None:
    """The checkpoint a Tune trial goes on from: Tune's (a retry within this attempt), else
    the search snapshot's (``resume``), else none."""
    from ray import tune

    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return resume.get(trial_id)
    with checkpoint.as_directory() as d:
        return read_trial_checkpoint(d)


def announce(
    runtime: dict[str, Any], trial_id: str, values: dict[str, Any], restored: int | None, **extra: Any
) -> None:
    """The trial's start on the control channel: ``trial_restored`` at the iteration it goes
    on from, or ``trial_started`` with its values."""
    runkey.from_config(runtime)
    control = ControlChannel(runtime["control_url"], runtime.get("control_options"), keys=runkey.current())
    gen = int(runtime["generation"])
    if restored is not None:
        control.event(gen, "trial_restored", trial_id=trial_id, iteration=restored, pid=os.getpid(), **extra)
    else:
        control.event(gen, "trial_started", trial_id=trial_id, config=values, **extra)


# A multi-worker trial's report: each rank's telemetry, in rank order (rank 0's is also
# the report's "telemetry", as a world-of-one trial reports it).
RANK_TELEMETRY = "rank_telemetry"


def trial_report(loop: TrialLoop, iteration: int, metrics: dict[str, float]) -> dict[str, Any]:
    """What an iteration reports to Tune: the metrics (top level, for the scheduler, and
    together), the iteration, the weights' digest and the feed's telemetry."""
    return {
        **metrics,
        METRICS_KEY: metrics,
        "iteration": iteration,
        "weights_sha256": weights_sha256(loop.model.state_dict()),
        "telemetry": loop.feed.sampler.snapshot().to_json(),
    }


def trial_func(config: dict[str, Any], runtime: dict[str, Any], resume: dict[str, dict[str, bytes]]) -> None:
    """One Tune trial: a TrialLoop that goes on from Tune's checkpoint (a retry within this
    attempt) or else from the snapshot's (``resume``), if any, reporting each iteration."""
    from ray import tune  # in the trial's process; the rest of this module needs no Ray

    loop = TrialLoop(runtime, int(config[INDEX]), config.get(VALUES))
    parts = resumed_parts(loop.trial_id, resume)
    start = 0 if parts is None else loop.restore(parts)
    announce(runtime, loop.trial_id, loop.values, None if parts is None else start)

    def report(iteration: int, metrics: dict[str, float], folder: str) -> None:
        tune.report(trial_report(loop, iteration, metrics), checkpoint=tune.Checkpoint.from_directory(folder))

    loop.run(start, report)


def train_step(
    workload: Any,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    feed: WorkerData,
    step: int,
    clip: float,
    device: torch.device | None = None,
) -> None:
    """One optimizer step over the feed's micro-batches, as the run's loop takes it: the
    mean loss over ``grad_accum_steps``, clipping by total norm (under DDP, ``model``
    averages the gradients across the trial's workers)."""
    optimizer.zero_grad(set_to_none=True)
    micros = feed.micro_batches
    for micro in range(micros):
        batch = feed.batch(step, micro)
        loss = workload.loss(model, batch if device is None else to_device(batch, device))
        (loss / micros if micros > 1 else loss).backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
