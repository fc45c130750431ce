"""A multi-worker trial's reports, from Ray Train's controller to its Tune trial: rank 0's
metrics and the folder Ray Train gathered every rank's files in."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator.runtime.search.train_trial import RANK_TELEMETRY, forwarder

pytestmark = pytest.mark.unit


def test_rank_zeros_metrics_every_ranks_telemetry_and_the_gathered_folder_reach_the_trial() -> None:
    got: list[object] = []
    forward = forwarder(SimpleNamespace(put=got.append))
    zero, one = {"samples": 5}, {"samples": 4}
    forward.after_report(
        None,
        [{"accuracy": 0.5, "iteration": 1, "telemetry": zero}, {"iteration": 1, "telemetry": one}],
        SimpleNamespace(path="/c/1"),
    )
    forward.after_report(None, [{"iteration": 2}, {"iteration": 2}], None)
    assert got == [
        ({"accuracy": 0.5, "iteration": 1, "telemetry": zero, RANK_TELEMETRY: [zero, one]}, "/c/1"),
        ({"iteration": 2, RANK_TELEMETRY: [None, None]}, None),
    ]
