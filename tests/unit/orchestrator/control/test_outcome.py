"""An attempt's outcome (orchestrator/control/outcome.py) and the summary the journal keeps of it."""

from __future__ import annotations

import pytest

from orchestrator.control.outcome import AttemptOutcome
from recovery.detection import Failure, FailureKind

pytestmark = pytest.mark.unit


def test_the_summary_says_succeeded_the_failure_kind_or_interrupted() -> None:
    ok = AttemptOutcome(1, "local-a", 10.0, succeeded=True, last_step=40, restored_step=20, ended_at=12.0)
    assert ok.summary() == {
        "generation": 1,
        "region": "local-a",
        "started_at": 10.0,
        "ended_at": 12.0,
        "restored_step": 20,
        "last_step": 40,
        "outcome": "succeeded",
    }
    failed = AttemptOutcome(2, "local-b", 0.0, failure=Failure(FailureKind.PREEMPTED, "local-b", "notice"))
    assert failed.summary()["outcome"] == str(FailureKind.PREEMPTED)
    assert AttemptOutcome(3, "local-b", 0.0).summary()["outcome"] == "interrupted"
