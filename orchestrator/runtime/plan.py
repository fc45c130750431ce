"""What an attempt's driver does, decided before it starts anything (pure).

From the runtime spec and what the Ray in use can do, ``plan_attempt`` decides what
runs (the built-in loop, a user's Ray Train function, a search), how large the worker
group is and who sizes it, where its workers go, whether a lost worker's peers keep
their processes (survivors) and whether each node keeps a spare worker process: each
decision with the reason for it. The driver (``__main__``) carries the plan out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orchestrator.wire.spec import RuntimeSpec
from recovery.detection import EXIT_INFRA, EXIT_OK, EXIT_PREEMPTED, EXIT_USER_ERROR, EXIT_WORKERS_EXHAUSTED


class Entry(StrEnum):
    """What the attempt runs."""

    LOOP = "loop"  # the built-in training loop, for job.workload
    TRAIN_FUNC = "train_func"  # a user's Ray Train function, job.train_func
    SEARCH = "search"  # a Ray Tune search (an hpo section)


@dataclass(frozen=True)
class RayOffers:
    """What the Ray in use can do, as it reports it."""

    replicas: bool  # Ray Train replaces one worker of a group and leaves the others running
    hooks: bool  # the Ray Train internals the runtime hooks are present (trainer.RAY_TRAIN_HOOKS)


@dataclass(frozen=True)
class Plan:
    """One attempt's decisions, each with its reason (``*_why``)."""

    entry: Entry
    workers: int  # the run's logical world (trainer.workers)
    backend: str  # torch's: nccl between GPU workers, gloo on CPUs
    use_gpu: bool
    resources_per_worker: tuple[tuple[str, float], ...]
    placement_strategy: str  # Ray's: SPREAD or PACK
    placement_why: str
    sized: bool  # each worker group's size is decided anew (a WorldPolicy), not fixed
    sized_why: str
    survivors: bool  # a lost worker is replaced and the others keep their processes
    survivors_why: str
    survivors_off_said: bool  # the journal says why survivors are off (``survivors_off``)
    spares: bool  # each node keeps a spare worker process, started ahead
    spares_why: str
    ray_datasets: bool  # the training set goes to Ray Train as a Ray Data dataset


def why_not_survivors(spec: RuntimeSpec) -> str | None:
    """Why this attempt restarts its whole worker group on a lost worker (None: survivors
    keep their processes). The spec alone (what Ray can do is asked apart)."""
    trainer = spec.trainer
    if spec.survivors == "off":
        return "recovery.survivors=off"
    if spec.hpo is not None:
        return "a search's trials restart on their own"
    if spec.job.train_func:
        return "a job.train_func keeps its own state: its group restarts"
    if trainer.workers < 2:
        return "one worker: nothing survives its loss"
    if trainer.gpus_per_worker > 0:
        return "GPU workers: an NCCL group broken by a lost peer is not re-formed yet"
    if spec.data.loader == "ray_data":
        return "data.loader=ray_data: its split is Ray Data's, restarted with the group"
    return None


def why_no_spares(spec: RuntimeSpec) -> str | None:
    """Why this attempt keeps no spare workers (None: it does, survivors kept or not)."""
    if spec.spares == "off":
        return "recovery.spares=off"
    if spec.hpo is not None:
        return "a search's trials restart on their own"
    if spec.trainer.gpus_per_worker > 0:
        return "GPU workers: a spare holds no GPU, and Ray hides the devices from a process started without one"
    if spec.data.loader == "ray_data":
        return "data.loader=ray_data: its split is Ray Data's, restarted with the group"
    return None


def plan_attempt(spec: RuntimeSpec, ray: RayOffers) -> Plan:
    """The attempt's plan from its spec and what ``ray`` offers."""
    trainer = spec.trainer
    gpus = trainer.gpus_per_worker
    entry = Entry.SEARCH if spec.hpo is not None else Entry.TRAIN_FUNC if spec.job.train_func else Entry.LOOP
    resources = (("CPU", trainer.cpus_per_worker), *((("GPU", gpus),) if gpus else ()))
    if spec.nodes > 1:
        sized, sized_why = True, f"{spec.nodes} nodes: each group's size follows the nodes left"
    elif trainer.min_workers not in (0, trainer.workers):
        sized, sized_why = True, f"trainer.min_workers={trainer.min_workers}: an elastic world"
    else:
        sized, sized_why = False, f"one node and a fixed world of {trainer.workers}"
    survivors_why = why_not_survivors(spec)
    if survivors_why is None and not (ray.replicas and ray.hooks):
        survivors_why = "this Ray cannot replace one worker"
    spares_why = why_no_spares(spec)
    if spares_why is None and not ray.hooks:
        spares_why = "this Ray's Train internals are not the ones the spares hook"
    return Plan(
        entry=entry,
        workers=trainer.workers,
        backend="nccl" if gpus > 0 else "gloo",
        use_gpu=gpus > 0,
        resources_per_worker=resources,
        # One worker per node where it can: a lost node is then one worker's loss.
        placement_strategy="SPREAD" if spec.nodes > 1 else "PACK",
        placement_why="one worker per node: a lost node is one worker's loss" if spec.nodes > 1 else "one node",
        sized=sized,
        sized_why=sized_why,
        survivors=survivors_why is None,
        survivors_why=survivors_why or "a lost worker is replaced; the others keep their processes",
        survivors_off_said=survivors_why is not None and spec.survivors != "off" and trainer.workers > 1,
        spares=spares_why is None,
        spares_why=spares_why or "each node keeps a worker process started ahead",
        ray_datasets=spec.data.loader == "ray_data",
    )


def exit_after_fit(raised: bool, user_error: bool, final: bool, preempted: bool) -> int:
    """The driver's exit code once Ray Train's fit() returned or ``raised``: ``user_error``,
    a worker reported the workload's own error; ``final``, the result is written;
    ``preempted``, the workers checkpointed and stopped on a notice."""
    if raised:
        return EXIT_USER_ERROR if user_error else EXIT_WORKERS_EXHAUSTED
    if final:
        return EXIT_OK
    return EXIT_PREEMPTED if preempted else EXIT_INFRA
