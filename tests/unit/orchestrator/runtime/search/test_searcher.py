"""Tune's side of a searcher that proposes trials: the unfinished ones first, then its
proposals, each appended to the search's list of trials and told its result once."""

from __future__ import annotations

import pytest
from ray.tune.search import Searcher

from orchestrator.hpo.replay import ASK, TELL, OptunaReplay
from orchestrator.runtime.search.searcher import ProposingSearcher
from orchestrator.runtime.search.trial import INDEX, VALUES

pytestmark = pytest.mark.unit
SPACE = {"job.lr": "loguniform 0.001 0.3", "job.params.hidden": "choice 8 16 32"}


def test_the_unfinished_trials_come_first_then_proposals_until_num_samples() -> None:
    proposer = OptunaReplay(SPACE, 0, "max", 4)
    configs: list = []
    for _ in range(2):  # proposed in an earlier attempt; trial 1 left unfinished
        configs.append(proposer.ask()[1])
    proposer.tell(0, 0.5)
    searcher = ProposingSearcher(proposer, configs, [1], "accuracy", "max")
    first = searcher.suggest("t-a")
    assert first == {INDEX: 1, VALUES: configs[1]}
    second, third = searcher.suggest("t-b"), searcher.suggest("t-c")
    assert [second[INDEX], third[INDEX]] == [2, 3] and len(configs) == 4
    assert second[VALUES] == configs[2] and third[VALUES] == configs[3]
    assert searcher.suggest("t-d") == Searcher.FINISHED
    searcher.on_trial_complete("t-b", {"accuracy": 0.75})
    searcher.on_trial_complete("t-c", {"accuracy": 0.2}, error=True)
    searcher.on_trial_complete("t-a", {"accuracy": 0.25})
    assert proposer.events[-3:] == [[TELL, 2, 0.75], [TELL, 3, None], [TELL, 1, 0.25]]
    assert proposer.events[:3] == [[ASK, 0], [ASK, 1], [TELL, 0, 0.5]]
    # Told once: a trial resumed after it errored (and was told so) is not told again.
    searcher.on_trial_complete("t-c", {"accuracy": 0.9})
    searcher.on_trial_complete("unknown", {"accuracy": 0.9})
    assert len(proposer.events) == 8
