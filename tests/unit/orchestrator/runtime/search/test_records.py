"""Trials as records: a live trial (or what the snapshot said of it until it reports), an
ended one from Tune's result, and the telemetry of each. Stand-ins for Tune's objects."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.hpo import ERROR, TERMINATED, TrialRecord, search_step, trial_key
from orchestrator.runtime.search.records import (
    ended_records,
    final_records,
    live_record,
    live_records,
    live_workers,
    result_record,
    result_workers,
)
from orchestrator.runtime.search.trial import INDEX, RANK_TELEMETRY

pytestmark = pytest.mark.unit
CONFIGS: list[dict[str, Any]] = [{"lr": 0.1}, {"lr": 0.2}, {"lr": 0.3}]
SHA = "a" * 64


def trial(index: int, status: str = "RUNNING", last: dict[str, Any] | None = None, ckpt_it: int | None = None) -> Any:
    latest = None if ckpt_it is None else SimpleNamespace(metrics={"iteration": ckpt_it}, checkpoint=None)
    manager = SimpleNamespace(latest_checkpoint_result=latest)
    return SimpleNamespace(
        config={INDEX: index},
        status=status,
        last_result=last,
        run_metadata=SimpleNamespace(checkpoint_manager=manager),
        error_file="/tmp/error.txt" if status == ERROR else None,
    )


def test_a_live_trial_that_reported_is_recorded_from_its_last_result() -> None:
    # The workload's metrics: the ones under eval_metrics, not Tune's own numbers beside them.
    metrics = {"accuracy": 0.5, "eval_loss": 1.0, "perplexity": 2.7}
    last = {"iteration": 3, **metrics, "eval_metrics": metrics, "other": 7, "weights_sha256": SHA}
    record = live_record(trial(1, last=last, ckpt_it=2), CONFIGS, {})
    assert record == TrialRecord(
        trial_id="trial_00001",
        status="RUNNING",
        iteration=3,
        config={"lr": 0.2},
        metrics=metrics,
        checkpoint_iteration=2,
        error=None,
        weights_sha256=SHA,
    )


def test_until_it_reports_a_restored_trial_is_what_the_snapshot_said_with_its_live_status() -> None:
    before = TrialRecord("trial_00002", "PAUSED", 4, {"lr": 0.3}, {"accuracy": 0.4}, 4)
    record = live_record(trial(2, status="PENDING"), CONFIGS, {"trial_00002": before})
    assert record.status == "PENDING" and record.iteration == 4 and record.checkpoint_iteration == 4


def test_an_errored_trial_names_its_error_file() -> None:
    record = live_record(trial(0, status=ERROR, last={"iteration": 1}), CONFIGS, {})
    assert record.error == "/tmp/error.txt" and record.checkpoint_iteration is None


def test_live_records_merge_the_carried_with_the_live_by_id() -> None:
    carried = [TrialRecord("trial_00002", TERMINATED, 6, {"lr": 0.3})]
    records = live_records(carried, [trial(1), trial(0)], CONFIGS, {})
    assert [r.trial_id for r in records] == ["trial_00000", "trial_00001", "trial_00002"]
    assert records[2] is carried[0]


def test_live_workers_are_the_running_trials_with_telemetry() -> None:
    tele = {"samples_per_s": 3.0}
    trials = [trial(0, last={"telemetry": tele}), trial(1, status=TERMINATED, last={"telemetry": tele}), trial(2)]
    assert live_workers(trials) == [{"samples_per_s": 3.0, "rank": 0, "trial_id": "trial_00000", "trial_rank": 0}]


def test_a_multi_worker_trial_is_one_worker_per_rank_and_a_rank_without_telemetry_is_left_out() -> None:
    ranks = [{"samples_per_s": 3.0}, None, {"samples_per_s": 2.0}]
    trials = [trial(0, last={"telemetry": {"samples_per_s": 9.0}}), trial(1, last={RANK_TELEMETRY: ranks})]
    assert live_workers(trials) == [
        {"samples_per_s": 9.0, "rank": 0, "trial_id": "trial_00000", "trial_rank": 0},
        {"samples_per_s": 3.0, "rank": 1, "trial_id": "trial_00001", "trial_rank": 0},
        {"samples_per_s": 2.0, "rank": 2, "trial_id": "trial_00001", "trial_rank": 2},
    ]


def result(index: int, metrics: dict[str, Any], error: BaseException | None = None, checkpoint: bool = True) -> Any:
    return SimpleNamespace(
        config={INDEX: index}, metrics=metrics, error=error, checkpoint=object() if checkpoint else None
    )


def test_an_ended_trial_is_terminated_or_errored_as_its_result_says() -> None:
    done = result_record(result(0, {"iteration": 6, "accuracy": 0.9, "weights_sha256": SHA}), CONFIGS)
    assert (done.status, done.iteration, done.checkpoint_iteration, done.weights_sha256) == (TERMINATED, 6, 6, SHA)
    failed = result_record(result(1, {}, error=RuntimeError("boom"), checkpoint=False), CONFIGS)
    assert (failed.status, failed.error, failed.checkpoint_iteration) == (ERROR, "RuntimeError: boom", None)
    assert failed.config == {"lr": 0.2}


def test_final_records_put_tunes_ends_over_the_carried_in_id_order() -> None:
    carried = [TrialRecord("trial_00002", TERMINATED, 6, {"lr": 0.3}), TrialRecord("trial_00000", ERROR, 1, {})]
    records = final_records(carried, [result(0, {"iteration": 6}), result(1, {"iteration": 2})], CONFIGS)
    assert [(r.trial_id, r.status, r.iteration) for r in records] == [
        ("trial_00000", TERMINATED, 6),
        ("trial_00001", TERMINATED, 2),
        ("trial_00002", TERMINATED, 6),
    ]


def test_result_workers_number_the_workers_of_the_results_that_carry_telemetry() -> None:
    tele = {"samples_per_s": 1.0}
    results = [result(2, {"telemetry": tele}), result(0, {}), result(1, {RANK_TELEMETRY: [tele, tele]})]
    assert result_workers(results) == [
        {"samples_per_s": 1.0, "rank": 0, "trial_id": "trial_00002", "trial_rank": 0},
        {"samples_per_s": 1.0, "rank": 1, "trial_id": "trial_00001", "trial_rank": 0},
        {"samples_per_s": 1.0, "rank": 2, "trial_id": "trial_00001", "trial_rank": 1},
    ]


def test_the_result_claims_the_records_of_the_last_snapshot_when_there_is_one() -> None:
    """A trial restored at its last iteration reports nothing in this attempt: Tune ends it
    with no iteration while its live record (in the signed snapshot) keeps the restored
    one. The result claims what was signed, in id order; with no snapshot in this
    attempt, Tune's ends over the carried records."""
    signed = [
        TrialRecord(trial_key(1), "TERMINATED", iteration=6, config=dict(CONFIGS[1]), checkpoint_iteration=6),
        TrialRecord(trial_key(0), "TERMINATED", iteration=6, config=dict(CONFIGS[0]), checkpoint_iteration=6),
    ]
    results = [result(0, {"iteration": 6}), result(1, {})]
    assert ended_records(signed, [], results, CONFIGS) == sorted(signed, key=lambda r: r.trial_id)
    assert search_step(ended_records(signed, [], results, CONFIGS)) == 14
    assert ended_records(None, [], results, CONFIGS) == final_records([], results, CONFIGS)
    assert search_step(ended_records(None, [], results, CONFIGS)) == 8
