"""result.json: the outcome of a run, for people and for scripts."""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from recovery.store import CheckpointStore, StoreError

if TYPE_CHECKING:
    from orchestrator.controller import RunRecord

RESULT_NAME = "result.json"


def _newest_committed(run_id: str, stores: dict[str, CheckpointStore]) -> str | None:
    best: tuple[int, str] | None = None
    for store in stores.values():
        try:
            steps = store.committed_steps(run_id)
        except StoreError:
            continue
        if steps and (best is None or steps[-1] > best[0]):
            best = (steps[-1], store.checkpoint_url(run_id, steps[-1]))
    return None if best is None else best[1]


def build_result(record: RunRecord, stores: dict[str, CheckpointStore]) -> dict[str, Any]:
    final = record.final or {}
    last_step = max([a.get("last_step") or 0 for a in record.attempts] or [0])
    finished = time.time()
    return {
        "run_id": record.run_id,
        "status": record.status,
        "reason": record.reason,
        "region": record.region,
        "final_step": final.get("final_step", last_step),
        "metrics": final.get("metrics", {}),
        "final_checkpoint": final.get("final_checkpoint") or _newest_committed(record.run_id, stores),
        "weights_sha256": final.get("weights_sha256"),
        # job.train_func: sha256 over the final checkpoint's "<file> <sha256>" lines (its weights are not ours to know).
        "checkpoint_sha256": final.get("checkpoint_sha256"),
        "attempts": len(record.attempts),
        "attempt_history": record.attempts,
        "incidents": [i.record() for i in record.incidents],
        "error_traceback": record.error_traceback,
        "train_steps_per_s": final.get("train_steps_per_s"),
        # Per worker (CPU, peak RSS, network bytes, samples/s; GPU through NVML or why absent).
        "telemetry": final.get("telemetry"),
        # A search (hpo.enabled): the winning trial and every trial's outcome.
        **(
            {"best_trial": final.get("best_trial"), "trials": final.get("trials", []), "search": final.get("search")}
            if "trials" in final
            else {}
        ),
        "started_at": record.started_at,
        "finished_at": finished,
        "duration_s": round(finished - record.started_at, 3),
    }


def write_result(run_dir: str, record: RunRecord, stores: dict[str, CheckpointStore]) -> dict[str, Any]:
    result = build_result(record, stores)
    path = os.path.join(run_dir, RESULT_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)
    return result


def read_result(run_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(run_dir, RESULT_NAME), encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
