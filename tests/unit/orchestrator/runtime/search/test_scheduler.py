"""ASHA over our own rungs, as Tune's scheduler: what it tells Tune for each result."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.hpo import AshaRungs, asha_rungs
from orchestrator.runtime.search.trial import INDEX

pytestmark = pytest.mark.unit
HPO = SimpleNamespace(metric="accuracy", mode="max", max_t=4, scheduler="asha")


@pytest.fixture(scope="module")
def tune() -> Any:
    """Tune's schedulers and ours, imported by these tests only (Ray Tune takes seconds)."""
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    from orchestrator.runtime.search.scheduler import CappedFIFO, StableASHA, StablePBT, make_scheduler

    return SimpleNamespace(
        FIFOScheduler=FIFOScheduler,
        CappedFIFO=CappedFIFO,
        TrialScheduler=TrialScheduler,
        StableASHA=StableASHA,
        StablePBT=StablePBT,
        make_scheduler=make_scheduler,
    )


def rungs() -> AshaRungs:
    return AshaRungs(asha_rungs(4, 1, 2), 2, "max")


def test_fifo_without_rungs_asha_with_them(tune: Any) -> None:
    fifo = tune.make_scheduler(HPO, None)  # type: ignore[arg-type]
    assert isinstance(fifo, tune.FIFOScheduler) and type(fifo) is tune.CappedFIFO
    asha = tune.make_scheduler(HPO, rungs())  # type: ignore[arg-type]
    assert isinstance(asha, tune.StableASHA) and (asha.search_metric, asha.max_t) == ("accuracy", 4)


def test_fifo_ends_a_trial_at_max_t_whatever_it_reports(tune: Any) -> None:
    """A train function reports as often as it likes: FIFO ends its trial at hpo.max_t."""
    fifo = tune.CappedFIFO(4)
    t = SimpleNamespace(config={INDEX: 0})
    assert fifo.on_trial_result(None, t, {"iteration": 3, "accuracy": 0.5}) == tune.TrialScheduler.CONTINUE
    assert fifo.on_trial_result(None, t, {"accuracy": 0.5}) == tune.TrialScheduler.CONTINUE
    assert fifo.on_trial_result(None, t, {"iteration": 4}) == tune.TrialScheduler.STOP


def test_a_result_without_the_metric_goes_on_and_max_t_stops(tune: Any) -> None:
    asha = tune.StableASHA(rungs(), "accuracy", 4)
    t = SimpleNamespace(config={INDEX: 0})
    assert asha.on_trial_result(None, t, {"iteration": 1}) == tune.TrialScheduler.CONTINUE
    assert asha.on_trial_result(None, t, {"iteration": 4, "accuracy": 0.1}) == tune.TrialScheduler.STOP


def test_the_rungs_are_kept_by_our_trial_ids_and_a_poor_trial_stops(tune: Any) -> None:
    state = rungs()
    asha = tune.StableASHA(state, "accuracy", 4)
    good, poor = SimpleNamespace(config={INDEX: 0}), SimpleNamespace(config={INDEX: 1})
    assert asha.on_trial_result(None, good, {"iteration": 1, "accuracy": 0.9}) == tune.TrialScheduler.CONTINUE
    assert asha.on_trial_result(None, poor, {"iteration": 1, "accuracy": 0.1}) == tune.TrialScheduler.STOP
    assert "trial_00000" in state.to_json()["1"] and "trial_00001" in state.to_json()["1"]


def test_pbt_explores_the_donors_values_and_hands_each_exploit_over(tune: Any) -> None:
    from orchestrator.hpo.pbt import Exploit, decision_rng, explore
    from orchestrator.runtime.search.trial import VALUES

    space = {"lr": "loguniform 0.01 0.2", "hidden_size": "choice 32 64 128"}
    hpo = SimpleNamespace(
        metric="accuracy",
        mode="max",
        max_t=6,
        scheduler="pbt",
        perturbation_interval=2,
        quantile_fraction=0.25,
        search_space=space,
        mutate=[],
    )
    configs = [{"lr": 0.05, "hidden_size": 64}, {"lr": 0.1, "hidden_size": 32}]
    seen: list[Exploit] = []
    pbt = tune.make_scheduler(hpo, None, lambda: tune.StablePBT(hpo, 3, configs, seen.append))
    assert isinstance(pbt, tune.StablePBT)

    class T:  # a trial as PBT keys its state: by the object
        def __init__(self, index: int) -> None:
            self.config = {INDEX: index}

    worse, better = T(0), T(1)
    pbt._trial_state = {worse: SimpleNamespace(last_train_time=4), better: SimpleNamespace(last_train_time=4)}
    new, _ = pbt._get_new_config(worse, better)
    assert new == {INDEX: 0, VALUES: explore(space, configs[1], decision_rng(3, "trial_00000", 4), ["lr"])}
    assert new[VALUES]["hidden_size"] == 32  # an integer key: the donor's, so its checkpoint fits
