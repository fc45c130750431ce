"""A search's trials as records: live ones from Tune's trials, finished ones from its results.

A record (orchestrator.hpo.TrialRecord) is what a snapshot, the progress and the result
say of a trial. Duck-typed over Tune's objects: a trial has ``config``, ``status``,
``last_result``, ``run_metadata``; a result has ``config``, ``metrics``, ``error``,
``checkpoint``.
"""

from __future__ import annotations

from typing import Any

from orchestrator.hpo import ERROR, TERMINATED, TrialRecord, trial_key
from orchestrator.runtime.search.snapshot import METRICS_KEY
from orchestrator.runtime.search.trial import INDEX, RANK_TELEMETRY, trial_id_of


def reported_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The workload's metrics in a trial's report (see trial.eval_metrics), as numbers."""
    metrics = result.get(METRICS_KEY)
    if not isinstance(metrics, dict):
        return {}
    return {str(k): float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def latest_checkpoint(trial: Any) -> Any:
    """The newest checkpoint Tune has registered for a live trial (its result), or None."""
    manager = getattr(trial.run_metadata, "checkpoint_manager", None)
    return getattr(manager, "latest_checkpoint_result", None)


def live_record(trial: Any, configs: list[dict[str, Any]], restored: dict[str, TrialRecord]) -> TrialRecord:
    """A live trial's record; until it reports, what the snapshot said of it (its status live)."""
    trial_id = trial_id_of(trial)
    last = trial.last_result or {}
    before = restored.get(trial_id)
    ckpt_it: int | None = None
    latest = latest_checkpoint(trial)
    if latest is not None and latest.metrics:
        ckpt_it = int(latest.metrics.get("iteration", 0)) or None
    if ckpt_it is None and before is not None:
        ckpt_it = before.checkpoint_iteration
    error = None
    if trial.status == ERROR:
        error = str(getattr(trial, "error_file", None) or "errored")[:2000]
    if not last.get("iteration") and before is not None:
        return TrialRecord(**{**before.to_json(), "status": str(trial.status), "checkpoint_iteration": ckpt_it})
    sha = last.get("weights_sha256")
    digest = last.get("checkpoint_sha256")
    return TrialRecord(
        trial_id=trial_id,
        status=str(trial.status),
        iteration=int(last.get("iteration", 0) or 0),
        config=dict(configs[int(trial.config[INDEX])]),
        metrics=reported_metrics(last),
        checkpoint_iteration=ckpt_it,
        error=error,
        weights_sha256=sha if isinstance(sha, str) else None,
        checkpoint_sha256=digest if isinstance(digest, str) else None,
    )


def live_records(
    carried: list[TrialRecord], trials: list[Any], configs: list[dict[str, Any]], restored: dict[str, TrialRecord]
) -> list[TrialRecord]:
    """Every trial of the search, by id: the carried ones as the snapshot had them, the rest live."""
    merged = {r.trial_id: r for r in carried}
    for t in trials:
        merged[trial_id_of(t)] = live_record(t, configs, restored)
    return [merged[k] for k in sorted(merged)]


def trial_workers(report: dict[str, Any], trial_id: str) -> list[dict[str, Any]]:
    """A trial's workers' telemetry from its report: each rank's for a multi-worker trial
    (``RANK_TELEMETRY``), else its one worker's; each marked with the trial and its rank
    in it. A rank that sent no telemetry is left out."""
    ranks = report.get(RANK_TELEMETRY)
    if not isinstance(ranks, list):
        ranks = [report.get("telemetry")]
    return [{**tele, "trial_id": trial_id, "trial_rank": r} for r, tele in enumerate(ranks) if isinstance(tele, dict)]


def numbered(workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The search's workers, each with its place as ``rank`` (result.json's telemetry)."""
    return [{**w, "rank": i} for i, w in enumerate(workers)]


def live_workers(trials: list[Any]) -> list[dict[str, Any]]:
    """The running trials' telemetry, one entry per worker of each (trials in the order given)."""
    return numbered(
        [w for t in trials if t.status == "RUNNING" for w in trial_workers(t.last_result or {}, trial_id_of(t))]
    )


def result_record(result: Any, configs: list[dict[str, Any]]) -> TrialRecord:
    """A trial's record from Tune's result once the experiment has ended."""
    m = result.metrics or {}
    index = int((result.config or {})[INDEX])
    sha = m.get("weights_sha256")
    digest = m.get("checkpoint_sha256")
    return TrialRecord(
        trial_id=trial_key(index),
        status=ERROR if result.error is not None else TERMINATED,
        iteration=int(m.get("iteration", 0) or 0),
        config=dict(configs[index]),
        metrics=reported_metrics(m),
        checkpoint_iteration=int(m.get("iteration", 0) or 0) if result.checkpoint is not None else None,
        error=None if result.error is None else f"{type(result.error).__name__}: {str(result.error)[:300]}",
        weights_sha256=sha if isinstance(sha, str) else None,
        checkpoint_sha256=digest if isinstance(digest, str) else None,
    )


def final_records(carried: list[TrialRecord], results: list[Any], configs: list[dict[str, Any]]) -> list[TrialRecord]:
    """Every trial of the search once it has ended, by id: carried ones as recorded, the rest as Tune ended them."""
    records = {r.trial_id: r for r in carried}
    for r in results:
        record = result_record(r, configs)
        records[record.trial_id] = record
    return [records[k] for k in sorted(records)]


def ended_records(
    snapshotted: list[TrialRecord] | None,
    carried: list[TrialRecord],
    results: list[Any],
    configs: list[dict[str, Any]],
) -> list[TrialRecord]:
    """The records a search's result claims: those its last snapshot of this attempt holds
    (what the signed checkpoint says, which the controller checks the claim against), else
    Tune's ends over the carried ones. Tune's end and the live record can differ for a
    trial that reported nothing in this attempt (restored at its last iteration): the
    claim must be what was signed."""
    if snapshotted is not None:
        return sorted(snapshotted, key=lambda r: r.trial_id)
    return final_records(carried, results, configs)


def result_workers(results: list[Any]) -> list[dict[str, Any]]:
    """The ended trials' last telemetry, one entry per worker of each (trials in the results' order)."""
    return numbered(
        [w for r in results for w in trial_workers(r.metrics or {}, trial_key(int((r.config or {})[INDEX])))]
    )
