"""A multi-worker trial's reports, from Ray Train's controller to its Tune trial: rank 0's
metrics and the folder Ray Train gathered every rank's files in."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator.runtime.search.train_trial import forwarder

pytestmark = pytest.mark.unit


def test_rank_zeros_metrics_and_the_gathered_folder_reach_the_trial() -> None:
    got: list[object] = []
    forward = forwarder(SimpleNamespace(put=got.append))
    forward.after_report(None, [{"accuracy": 0.5, "iteration": 1}, {"iteration": 1}], SimpleNamespace(path="/c/1"))
    forward.after_report(None, [{"iteration": 2}, {"iteration": 2}], None)
    assert got == [({"accuracy": 0.5, "iteration": 1}, "/c/1"), ({"iteration": 2}, None)]
