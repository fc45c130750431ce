"""``orchestrator.api.result.Result``: result.json as a typed record."""

from __future__ import annotations

import pytest

from orchestrator.api.result import Result

pytestmark = pytest.mark.unit

RESULT = {"status": "SUCCEEDED", "final_step": 5, "final_checkpoint": "file:///s/step-5", "metrics": {"loss": 0.5},
          "incidents": [], "attempts": 1, "duration_s": 1.5, "weights_sha256": "ab", "trials": []}  # fmt: skip


def test_the_typed_fields_and_the_whole_file() -> None:
    r = Result.from_json(RESULT, "r1")
    assert (r.run_id, r.status, r.final_step, r.metrics, r.weights_sha256) == (
        "r1",
        "SUCCEEDED",
        5,
        {"loss": 0.5},
        "ab",
    )
    assert r.succeeded and not r.resumable and r.raw["trials"] == [] and r.reason == ""
    assert Result.from_json({**RESULT, "run_id": "named"}, "r1").run_id == "named"


def test_an_objective_missed_is_no_success_and_a_stop_is_resumable() -> None:
    missed = Result.from_json({**RESULT, "objectives": {"met": False, "checked": []}})
    assert missed.status == "SUCCEEDED" and not missed.succeeded
    stopped = Result.from_json({**RESULT, "status": "INTERRUPTED", "final_step": None})
    assert stopped.resumable and stopped.final_step is None and not stopped.succeeded
