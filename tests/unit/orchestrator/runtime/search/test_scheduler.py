"""ASHA over our own rungs, as Tune's scheduler: what it tells Tune for each result."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from orchestrator.hpo import AshaRungs, asha_rungs
from orchestrator.runtime.search.scheduler import StableASHA, make_scheduler
from orchestrator.runtime.search.trial import INDEX

pytestmark = pytest.mark.unit
HPO = SimpleNamespace(metric="accuracy", mode="max", max_t=4)


def rungs() -> AshaRungs:
    return AshaRungs(asha_rungs(4, 1, 2), 2, "max")


def test_fifo_without_rungs_asha_with_them() -> None:
    assert type(make_scheduler(HPO, None)) is FIFOScheduler  # type: ignore[arg-type]
    asha = make_scheduler(HPO, rungs())  # type: ignore[arg-type]
    assert isinstance(asha, StableASHA) and (asha.search_metric, asha.max_t) == ("accuracy", 4)


def test_a_result_without_the_metric_goes_on_and_max_t_stops() -> None:
    asha = StableASHA(rungs(), "accuracy", 4)
    t = SimpleNamespace(config={INDEX: 0})
    assert asha.on_trial_result(None, t, {"iteration": 1}) == TrialScheduler.CONTINUE
    assert asha.on_trial_result(None, t, {"iteration": 4, "accuracy": 0.1}) == TrialScheduler.STOP


def test_the_rungs_are_kept_by_our_trial_ids_and_a_poor_trial_stops() -> None:
    state = rungs()
    asha = StableASHA(state, "accuracy", 4)
    good, poor = SimpleNamespace(config={INDEX: 0}), SimpleNamespace(config={INDEX: 1})
    assert asha.on_trial_result(None, good, {"iteration": 1, "accuracy": 0.9}) == TrialScheduler.CONTINUE
    assert asha.on_trial_result(None, poor, {"iteration": 1, "accuracy": 0.1}) == TrialScheduler.STOP
    assert "trial_00000" in state.to_json()["1"] and "trial_00001" in state.to_json()["1"]
