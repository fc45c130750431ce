"""When a fault fires: pure functions over a fault's plain config (what the runtime gets).

Runtime-side triggers (a step, a random step, an upload, a restore) are met by the
runtime, which then asks the controller to fire the fault (the rendezvous in
``orchestrator.chaos.injector``); controller-side ones (seconds into an attempt,
provisioning, a failover) are met by the controller itself.
"""

from __future__ import annotations

import random as _random
from functools import lru_cache
from typing import Any

from orchestrator.chaos.kinds import CONTROLLER_POINTS, RUNTIME_POINTS, STORAGE_FAULTS

__all__ = ["CONTROLLER_POINTS", "RUNTIME_POINTS"]


@lru_cache(maxsize=64)
def random_steps(seed: int, rate: float, total: int) -> frozenset[int]:
    """The steps a ``random: {seed, rate}`` fault fires at: drawn once, the same in every attempt."""
    rng = _random.Random(seed)
    return frozenset(step for step in range(1, total + 1) if rng.random() < rate)


def in_region(fault: dict[str, Any], region: str) -> bool:
    """A fault aimed at a region fires only there; storage faults name the store instead."""
    target = fault.get("region")
    return target is None or fault["kind"] in STORAGE_FAULTS or target == region


def due_at_step(fault: dict[str, Any], step: int, total: int) -> bool:
    if fault.get("at_step") is not None:
        return int(fault["at_step"]) == step
    rnd = fault.get("random")
    if rnd is not None:
        return step in random_steps(int(rnd.get("seed", 0)), float(rnd["rate"]), total)
    return False


def due_during(fault: dict[str, Any], point: str) -> bool:
    return fault.get("during") == point


def due_after(fault: dict[str, Any], training_for_s: float | None) -> bool:
    after = fault.get("after_s")
    return after is not None and training_for_s is not None and training_for_s >= float(after)


def exhausted(fault: dict[str, Any], fired: int) -> bool:
    return fired >= int(fault.get("repeat", 1) or 1)
