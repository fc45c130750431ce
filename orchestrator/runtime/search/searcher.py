"""hpo.search_alg=optuna in Tune: a Searcher over the search's OptunaReplay.

Tune asks it for a trial when a slot frees. It hands out first the trials the snapshot
left unfinished (their recorded values: they go on from their checkpoints), then
trials Optuna proposes, each one's values appended to the search's list of trials (the
list the records and the result read). Each ended trial's metric is told to Optuna; the
log of asks and tells travels in the snapshot (orchestrator.hpo.replay).
"""

from __future__ import annotations

from typing import Any

from ray.tune.search import Searcher

from orchestrator.hpo.replay import OptunaReplay
from orchestrator.runtime.search.trial import INDEX, VALUES


class ProposingSearcher(Searcher):
    def __init__(
        self, proposer: OptunaReplay, configs: list[dict[str, Any]], pending: list[int], metric: str, mode: str
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        self.proposer, self.configs, self.pending = proposer, configs, list(pending)
        self.indexes: dict[str, int] = {}

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True  # metric, mode and the space come from the run's config

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if self.pending:
            index = self.pending.pop(0)
        elif self.proposer.asked >= self.proposer.num_samples:
            return Searcher.FINISHED
        else:
            index, values = self.proposer.ask()
            assert index == len(self.configs)  # the list and the log grow together
            self.configs.append(values)
        self.indexes[trial_id] = index
        return {INDEX: index, VALUES: self.configs[index]}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        index = self.indexes.get(trial_id)
        # A trial told before (it errored, then was resumed by recovery.resume_errored) stays told.
        if index is None or index not in self.proposer.pending:
            return
        value = result.get(self.metric) if result and not error else None
        self.proposer.tell(index, None if value is None else float(value))
