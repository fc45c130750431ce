"""action=drill's fault as the controller reads it from the request file."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.chaos.drill import drill_fault

pytestmark = pytest.mark.unit


def test_a_drill_fault_strikes_the_region_the_run_trains_in_now() -> None:
    problem, fault = drill_fault({"kind": "kill_region"}, "local-a")
    assert problem is None and fault is not None and fault.kind == "kill_region"
    problem, fault = drill_fault({"kind": "preempt", "region": "local-a", "grace_s": 5}, "local-a")
    assert problem is None and fault is not None and fault.grace_s == 5


@pytest.mark.parametrize(
    ("plain", "words"),
    [
        ({"kind": "corrupt_peer_state"}, "not a fault a drill injects"),
        ({"kind": "user_error"}, "not a fault a drill injects"),
        ({"kind": "storage_outage"}, "not a fault a drill injects"),
        ({"kind": "explode"}, "fault.kind"),
        ({"kind": "kill_region", "at_step": 5}, "takes no trigger"),
        ({"kind": "kill_region", "region": "local-b"}, "the run trains in 'local-a'"),
        ({"kind": "kill_region", "shell": "rm -rf /"}, "fault"),
    ],
)
def test_a_fault_the_controller_must_not_inject_is_refused_with_why(plain: dict[str, Any], words: str) -> None:
    problem, fault = drill_fault(plain, "local-a")
    assert fault is None and problem is not None and words in problem and "\n" not in problem
