"""Trials as records: search steps, the best trial, the progress text."""

from __future__ import annotations

from orchestrator.hpo.asha import asha_rungs
from orchestrator.hpo.trials import TrialRecord, best_of, max_search_steps, progress_text, search_step


def test_search_steps_count_iterations_and_finished_trials() -> None:
    trials = [
        TrialRecord("a", "TERMINATED", iteration=6),
        TrialRecord("b", "TERMINATED", iteration=2),
        TrialRecord("c", "RUNNING", iteration=3),
        TrialRecord("d", "ERROR", iteration=1),
        TrialRecord("e", "PENDING"),
    ]
    assert search_step(trials) == 6 + 2 + 3 + 1 + 3
    assert max_search_steps(6, 6) == 42
    assert asha_rungs(6, 2, 2) == [2, 4]
    assert asha_rungs(9, 1, 3) == [1, 3]


def test_best_trial_follows_metric_and_mode_and_never_an_errored_one() -> None:
    trials = [
        TrialRecord("a", "TERMINATED", metrics={"accuracy": 0.90, "eval_loss": 0.30}),
        TrialRecord("b", "TERMINATED", metrics={"accuracy": 0.95, "eval_loss": 0.40}),
        TrialRecord("c", "ERROR", metrics={"accuracy": 0.99, "eval_loss": 0.01}),
    ]
    best_acc, best_loss = best_of(trials, "accuracy", "max"), best_of(trials, "eval_loss", "min")
    assert best_acc is not None and best_acc.trial_id == "b"
    assert best_loss is not None and best_loss.trial_id == "a"
    assert best_of([TrialRecord("x", "ERROR", metrics={"accuracy": 1.0})], "accuracy", "max") is None


def test_progress_text_shows_trials_and_the_best_so_far() -> None:
    text = progress_text(
        {"trials": {"running": 2, "terminated": 3}, "best": {"metric": "accuracy", "value": 0.9688, "trial_id": "t3"}}
    )
    assert text == "  trials 2 running 3 terminated  best accuracy 0.9688 (t3)"
    assert progress_text({"step": 3}) == ""
