"""The chaos rendezvous the train loop and the search driver share: a request on the
control channel, then a wait until the controller marks the fault fired."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from orchestrator.runtime import fault_rendezvous
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.sections import FaultSpec

pytestmark = pytest.mark.unit
FAULT = FaultSpec.from_plain({"kind": "kill_region", "at_step": 7, "region": "a", "repeat": 2})


def test_the_runtime_waits_until_the_controller_fires_the_fault(tmp_path: Path) -> None:
    control = ControlChannel(f"file://{tmp_path}/control")
    seen: list[dict] = []

    def controller() -> None:
        while not (requests := control.chaos_requests()):
            time.sleep(0.01)
        req = requests[0]
        seen.append({"seq": req.seq, "step": req.step, "generation": req.generation, "kind": req.kind})
        time.sleep(0.2)  # the fault takes a moment; the runtime must not go on meanwhile
        control.chaos_fired(0, req.seq, step=req.step)

    t = threading.Thread(target=controller)
    t.start()
    t0 = time.monotonic()
    assert fault_rendezvous.meet(control, 0, FAULT, step=7, rank=0, generation=3)
    assert time.monotonic() - t0 >= 0.2
    t.join()
    assert seen == [{"seq": 1, "step": 7, "generation": 3, "kind": "kill_region"}]
    assert control.fired_count(0) == 1
    # Fired once of twice: still armed here, never in another region.
    assert fault_rendezvous.armed(control, 0, FAULT, "a") and not fault_rendezvous.armed(control, 0, FAULT, "b")
    control.chaos_fired(0, 2, step=9)
    assert not fault_rendezvous.armed(control, 0, FAULT, "a")


def test_a_fault_the_controller_never_fires_lets_the_runtime_go_on(tmp_path: Path) -> None:
    control = ControlChannel(f"file://{tmp_path}/control")
    t0 = time.monotonic()
    assert not fault_rendezvous.meet(control, 0, FAULT, step=7, rank=0, generation=1, wait_s=0.2)
    assert 0.2 <= time.monotonic() - t0 < 5
