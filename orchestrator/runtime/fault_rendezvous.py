"""The chaos rendezvous, as the train loop and the search driver both meet it.

A runtime-side trigger (a step, an upload, a restore) is met on the cluster, but the
fault is the controller's to carry out (``orchestrator/chaos/injector.py``): the
runtime posts a request on the control channel (fault index, sequence number, kind,
step, rank, pid, generation) and waits until the controller marks it fired. So the
fault lands exactly at the step, whatever the controller's polling.
"""

from __future__ import annotations

import os
import time

from orchestrator.wire.control import ControlChannel
from orchestrator.wire.faults import FaultKind
from orchestrator.wire.sections import FaultSpec
from orchestrator.wire.triggers import exhausted, in_region

WAIT_S = 60.0
POLL_S = 0.05


def armed(control: ControlChannel, index: int, fault: FaultSpec, region: str, on_demand: bool = False) -> bool:
    """Whether fault ``index`` may still fire in ``region``: aimed here and not used up. A
    preemption never strikes on-demand capacity (``on_demand``: what the attempt runs on)."""
    if on_demand and fault.kind == FaultKind.preempt:
        return False
    return in_region(fault, region) and not exhausted(fault, control.fired_count(index))


def meet(
    control: ControlChannel,
    index: int,
    fault: FaultSpec,
    *,
    step: int,
    rank: int,
    generation: int,
    during: str | None = None,
    wait_s: float = WAIT_S,
) -> bool:
    """Ask the controller to fire fault ``index`` now and wait until it has; False if it
    did not within ``wait_s`` (the run goes on: a fault that never fires proves nothing,
    and the test that set it says so)."""
    seq = control.fired_count(index) + 1
    control.chaos_request(
        index,
        seq=seq,
        kind=str(fault.kind),
        step=step,
        rank=rank,
        pid=os.getpid(),
        generation=generation,
        during=during,
    )
    deadline = time.monotonic() + wait_s
    while control.fired_count(index) < seq:
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True
