"""Which trials go on: Tune's ASHA rule over our own rungs, FIFO (every trial to max_t), or
population-based training whose decisions are data (StablePBT)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.tune.schedulers import FIFOScheduler, PopulationBasedTraining, TrialScheduler

from orchestrator.hpo import AshaRungs
from orchestrator.hpo.pbt import Exploit, decision_rng, explore, mutable_keys
from orchestrator.runtime.search.records import latest_checkpoint
from orchestrator.runtime.search.trial import INDEX, VALUES, trial_id_of
from orchestrator.wire.sections import HpoSection


class CappedFIFO(FIFOScheduler):
    """FIFO that ends a trial at hpo.max_t iterations (a workload trial ends there itself;
    a train function reports as often as it likes)."""

    def __init__(self, max_t: int) -> None:
        super().__init__()
        self.max_t = max_t

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if int(result.get("iteration", 0)) >= self.max_t:
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE


class StableASHA(FIFOScheduler):
    """Tune's ASHA rule over AshaRungs: its state is data keyed by our trial ids, so it
    travels in a snapshot as JSON and a resumed search meets the rungs as they were."""

    def __init__(self, rungs: AshaRungs, metric: str, max_t: int) -> None:
        super().__init__()
        self.rungs, self.search_metric, self.max_t = rungs, metric, max_t

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True  # metric and mode come from the run's config, with the rungs

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if "iteration" not in result or self.search_metric not in result:
            return TrialScheduler.CONTINUE
        if int(result["iteration"]) >= self.max_t:
            return TrialScheduler.STOP
        stop = self.rungs.on_result(trial_id_of(trial), int(result["iteration"]), float(result[self.search_metric]))
        return TrialScheduler.STOP if stop else TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        if result and "iteration" in result and self.search_metric in result:
            self.rungs.on_result(trial_id_of(trial), int(result["iteration"]), float(result[self.search_metric]))


class StablePBT(PopulationBasedTraining):
    """Tune's PBT (asynchronous: a trial in the bottom quantile at a perturbation interval
    takes a top trial's newest checkpoint), with our explore (orchestrator.hpo.pbt: a
    pure function of the donor's values and the decision's seed) and each decision handed
    to ``on_exploit`` as an Exploit record. ``configs`` is the search's list of each
    trial's current values: an exploited trial's entry is replaced. Tune pickles its
    scheduler into its experiment folder (on the cluster's scratch, never a store):
    ``on_exploit`` is a module's function, not a bound method of a live object."""

    def __init__(
        self,
        hpo: HpoSection,
        seed: int,
        configs: list[dict[str, Any]],
        on_exploit: Callable[[Exploit], None],
        started: dict[str, int] | None = None,
    ) -> None:
        super().__init__(
            time_attr="iteration",
            metric=hpo.metric,
            mode=hpo.mode,
            perturbation_interval=hpo.perturbation_interval,
            quantile_fraction=hpo.quantile_fraction,
            custom_explore_fn=_unchanged,  # _get_new_config explores
            require_attrs=True,
        )
        self.space, self.seed, self.configs, self.on_exploit = dict(hpo.search_space), seed, configs, on_exploit
        self.max_t = hpo.max_t
        self.mutable = mutable_keys(self.space, list(hpo.mutate))
        # A trial resumed from iteration k perturbs next at k + interval, not at once.
        self.started = dict(started or {})

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True  # metric and mode come from the run's config

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        # At max_t a trial ends: no exploit there (a trial restored at max_t would end with
        # no result of its own, its donor's standing in for it).
        if int(result.get("iteration", 0)) >= self.max_t:
            return TrialScheduler.CONTINUE
        decision: str = super().on_trial_result(tune_controller, trial, result)
        return decision

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        super().on_trial_add(tune_controller, trial)
        self._trial_state[trial].last_perturbation_time = self.started.get(trial_id_of(trial), 0)

    def _checkpoint_or_exploit(self, trial: Any, tune_controller: Any, upper: list[Any], lower: list[Any]) -> None:
        """A trial in the bottom quantile takes the newest checkpoint Tune has registered
        for a top trial (the donor drawn with the decision's seed); none other is saved
        on demand, since every trial checkpoints at every iteration."""
        if trial not in lower or not upper:
            return
        ranked = sorted(upper, key=trial_id_of)
        rng = decision_rng(self.seed, trial_id_of(trial), int(self._trial_state[trial].last_train_time))
        donor = ranked[rng.randrange(len(ranked))]
        latest = latest_checkpoint(donor)
        if latest is None or latest.checkpoint is None or not latest.metrics:
            return  # the donor has no checkpoint yet: this trial goes on as it is
        state = self._trial_state[donor]
        state.last_checkpoint, state.last_result = latest.checkpoint, latest.metrics
        state.last_train_time = int(latest.metrics.get("iteration", state.last_train_time))
        self._exploit(tune_controller, trial, donor)

    def _get_new_config(self, trial: Any, trial_to_clone: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        donor = self.configs[int(trial_to_clone.config[INDEX])]
        rng = decision_rng(self.seed, trial_id_of(trial), int(self._trial_state[trial].last_train_time))
        return {INDEX: trial.config[INDEX], VALUES: explore(self.space, donor, rng, self.mutable)}, {}

    def _exploit(self, tune_controller: Any, trial: Any, trial_to_clone: Any) -> None:
        iteration = int(self._trial_state[trial].last_train_time)
        donor_iteration = int(self._trial_state[trial_to_clone].last_train_time)
        super()._exploit(tune_controller, trial, trial_to_clone)
        values = dict(trial.config[VALUES])
        self.configs[int(trial.config[INDEX])] = values
        self.on_exploit(Exploit(trial_id_of(trial), trial_id_of(trial_to_clone), iteration, donor_iteration, values))


def _unchanged(config: dict[str, Any]) -> dict[str, Any]:
    return config


def make_scheduler(
    hpo: HpoSection,
    rungs: AshaRungs | None,
    pbt: Callable[[], TrialScheduler] | None = None,
) -> TrialScheduler:
    """StableASHA over ``rungs`` for an ASHA search (rungs given), ``pbt()`` for PBT, else FIFO."""
    if hpo.scheduler == "pbt" and pbt is not None:
        return pbt()
    if rungs is None:
        return CappedFIFO(hpo.max_t)
    return StableASHA(rungs, hpo.metric, hpo.max_t)
