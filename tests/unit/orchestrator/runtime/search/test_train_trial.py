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


def test_a_gpu_trial_asks_each_worker_for_its_gpus_and_trains_on_them() -> None:
    from orchestrator.runtime.search.train_trial import trial_scaling
    from orchestrator.wire.sections import TrialSection

    assert trial_scaling(TrialSection(workers=2, cpus_per_worker=1.5, gpus_per_worker=1.0)) == {
        "num_workers": 2,
        "use_gpu": True,
        "resources_per_worker": {"CPU": 1.5, "GPU": 1.0},
    }
    assert trial_scaling(TrialSection(workers=2)) == {
        "num_workers": 2,
        "use_gpu": False,
        "resources_per_worker": {"CPU": 1.0},
    }
