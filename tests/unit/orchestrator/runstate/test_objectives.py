"""chaos.objectives judged on a run's result: each limit, what was measured, met or not."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.runstate.objectives import judge, missed_line

pytestmark = pytest.mark.unit
SHA = "ab" * 32
RESULT: dict[str, Any] = {
    "status": "SUCCEEDED",
    "weights_sha256": SHA,
    "incidents": [{"rto_s": 4.5, "lost_steps": 0}, {"rto_s": 12.0, "lost_steps": 20}, {"rto_s": None}],
}


def test_nothing_set_is_nothing_judged() -> None:
    assert judge(None, None, None, RESULT, None) is None


def test_each_objective_against_the_worst_incident() -> None:
    got = judge(15.0, 20, None, RESULT, None)
    assert got == {
        "met": True,
        "checked": [
            {"objective": "max_rto_s", "limit": 15.0, "measured": 12.0, "met": True},
            {"objective": "max_lost_steps", "limit": 20, "measured": 20, "met": True},
        ],
    }
    missed = judge(10.0, 0, None, RESULT, None)
    assert missed is not None and not missed["met"]
    assert missed_line(missed) == "objective missed: max_rto_s 10.0 (measured 12.0); max_lost_steps 0 (measured 20)"
    # No incident: no recovery to be slow.
    assert judge(0.5, 0, None, {**RESULT, "incidents": []}, None) == {
        "met": True,
        "checked": [
            {"objective": "max_rto_s", "limit": 0.5, "measured": None, "met": True},
            {"objective": "max_lost_steps", "limit": 0, "measured": None, "met": True},
        ],
    }


def test_exact_is_the_baselines_final_weights_and_a_run_that_succeeded() -> None:
    assert judge(None, None, "base", RESULT, {"weights_sha256": SHA})["met"]  # type: ignore[index]
    other = judge(None, None, "base", RESULT, {"weights_sha256": "cd" * 32})
    assert other is not None and missed_line(other) == "objective missed: exact (the weights differ from run 'base''s)"
    gone = judge(None, None, "base", RESULT, None)
    assert gone is not None and gone["checked"][0]["why"] == "no finished run named 'base' to compare with"
    failed = judge(None, None, "base", {**RESULT, "status": "FAILED"}, {"weights_sha256": SHA})
    assert failed is not None and not failed["met"]
    # A train function's: the checkpoint's hash stands for its weights.
    func = {"status": "SUCCEEDED", "checkpoint_sha256": SHA, "incidents": []}
    assert judge(None, None, "base", func, {"checkpoint_sha256": SHA})["met"]  # type: ignore[index]
