"""When a fault fires: pure functions over a fault as the runtime spec carries it.

Runtime-side triggers (a step, a random step, an upload, a restore) are met by the
runtime, which then asks the controller to fire the fault (the rendezvous in
``orchestrator.chaos.injector``); controller-side ones (seconds into an attempt,
provisioning, a failover) are met by the controller itself.
"""

from __future__ import annotations

import random as _random
from functools import lru_cache

from orchestrator.wire.faults import CONTROLLER_POINTS, RUNTIME_POINTS, STORAGE_FAULTS
from orchestrator.wire.sections import FaultSpec

__all__ = ["CONTROLLER_POINTS", "RUNTIME_POINTS"]


@lru_cache(maxsize=64)
def random_steps(seed: int, rate: float, total: int) -> frozenset[int]:
    """The steps a ``random: {seed, rate}`` fault fires at: drawn once, the same in every attempt."""
    rng = _random.Random(seed)
    return frozenset(step for step in range(1, total + 1) if rng.random() < rate)


def in_region(fault: FaultSpec, region: str) -> bool:
    """A fault aimed at a region fires only there; storage faults name the store instead."""
    return fault.region is None or fault.kind in STORAGE_FAULTS or fault.region == region


def due_at_step(fault: FaultSpec, step: int, total: int) -> bool:
    if fault.at_step is not None:
        return fault.at_step == step
    if fault.random is not None:
        return step in random_steps(fault.random.seed, fault.random.rate, total)
    return False


def crossed(fault: FaultSpec, before: int, now: int, total: int) -> bool:
    """A step trigger on a clock that may move by more than one (a train function's
    job.clock metric): its step (at_step, or a random one) in ``(before, now]``."""
    if fault.at_step is not None:
        return before < fault.at_step <= now
    if fault.random is not None and now > before:
        return any(before < step <= now for step in random_steps(fault.random.seed, fault.random.rate, total))
    return False


def due_during(fault: FaultSpec, point: str) -> bool:
    return fault.during == point


def due_after(fault: FaultSpec, training_for_s: float | None) -> bool:
    return fault.after_s is not None and training_for_s is not None and training_for_s >= fault.after_s


def exhausted(fault: FaultSpec, fired: int) -> bool:
    return fired >= fault.repeat
