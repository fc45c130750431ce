"""Which trials go on: Tune's ASHA rule over our own rungs, or FIFO (every trial to max_t)."""

from __future__ import annotations

from typing import Any

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from orchestrator.hpo import AshaRungs
from orchestrator.runtime.search.trial import trial_id_of
from orchestrator.wire.sections import HpoSection


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


def make_scheduler(hpo: HpoSection, rungs: AshaRungs | None) -> TrialScheduler:
    """StableASHA over ``rungs`` for an ASHA search (rungs given), else FIFO."""
    if rungs is None:
        return FIFOScheduler()
    return StableASHA(rungs, hpo.metric, hpo.max_t)
