"""result.json: the outcome of a run, for people and for scripts."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.runstate import rundir
from orchestrator.runstate.event_json import payload
from orchestrator.runstate.goodput import journal_goodput
from orchestrator.runstate.incidents import Incident
from orchestrator.runstate.journal import OPTIONAL_FIELDS, DamagedFile, load_json, read_typed, shape_problem
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.replay import incident_from
from orchestrator.runstate.state import RunView
from recovery.detection import FailureKind
from recovery.fsio import write_private
from recovery.policy import Action
from recovery.store import CheckpointStore, StoreError


@dataclass
class RunRecord:
    """What the controller knows of the run so far; result.json is made from it."""

    run_id: str
    started_at: float
    status: str = "RUNNING"
    reason: str = ""
    attempts: list[dict[str, Any]] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    final: dict[str, Any] | None = None
    region: str | None = None
    # The workload's own traceback, when a user error ended an attempt.
    error_traceback: str | None = None
    # When a user error ended the run: its exception line, step and the user's file:line.
    user_error: dict[str, Any] | None = None


def record_from(view: RunView, run_id: str, final: dict[str, Any] | None, started_at: float) -> RunRecord:
    """The run's record as its state has it: the verdict's status, reason and region,
    every attempt and incident journaled, the workload's traceback."""
    verdict = view.verdict
    return RunRecord(
        run_id=run_id,
        started_at=view.started_at or started_at,
        status=str(view.state) if view.state.stopped else "RUNNING",
        reason=(verdict.reason or "") if verdict is not None else "",
        attempts=[payload(a) for a in view.attempts],
        incidents=[incident_from(i) for i in view.incidents],
        final=final,
        region=verdict.region if verdict is not None else None,
        error_traceback=view.error_traceback,
        user_error=ended_by_user_error(view),
    )


def ended_by_user_error(view: RunView) -> dict[str, Any] | None:
    """The user error that failed the run (its last decision gave up on one), or None."""
    last = view.decisions[-1] if view.decisions else None
    if view.state is not RunState.FAILED or last is None or view.user_error is None:
        return None
    if last.action is not Action.GIVE_UP or last.failure is not FailureKind.USER_ERROR:
        return None
    return view.user_error.as_dict()


def _newest_committed(run_id: str, stores: dict[str, CheckpointStore], region: str | None = None) -> str | None:
    newest = _newest_signed(run_id, stores, region)
    return None if newest is None else newest[1]


def _region_first(stores: dict[str, CheckpointStore], region: str | None) -> list[CheckpointStore]:
    """The stores (by region), ``region``'s first and the rest in their order."""
    return [store for _, store in sorted(stores.items(), key=lambda item: item[0] != region)]


def _newest_signed(
    run_id: str, stores: dict[str, CheckpointStore], region: str | None = None
) -> tuple[int, str] | None:
    """The newest checkpoint (step, url) signed with the run's key in any store: one planted
    there (a higher step, unsigned or signed by another run) is never named as the run's.
    Replication puts a step in several stores: of those, ``region``'s (where the run ended)
    is named, so that the checkpoint a summary names is in the region it names (a store
    listed first, a region the run was lost in, is named only for a step it alone holds)."""
    best: tuple[int, str] | None = None
    for store in _region_first(stores, region):
        try:
            steps = store.committed_steps(run_id)
            for step in reversed(steps):
                if best is not None and step <= best[0]:
                    break
                manifest, verdict = store.trusted_manifest(run_id, step)
                if manifest is not None and verdict.ok:
                    best = (step, store.checkpoint_url(run_id, step))
                    break
        except StoreError:
            continue
    return best


def steps_done(attempt_steps: list[int], checkpoint_step: int | None) -> int:
    """How far a run that did not finish got: the newest step an attempt was seen at, or
    the newest checkpoint's, whichever is further. The workers train on between the
    controller's looks (and a Ctrl-C stops the looks first), so a checkpoint can be newer
    than any step the journal saw."""
    return max([*attempt_steps, checkpoint_step or 0])


def _goodput(run_dir: str, finished: float) -> dict[str, Any] | None:
    """Where the run's wall time went and what it cost, from its journal up to ``finished``."""
    try:
        events = list(read_typed(rundir.journal_path(run_dir)))
    except (DamagedFile, OSError):
        return None  # a journal that cannot be read tells no time: none is made up
    return journal_goodput(events, now=finished).as_dict()


def build_result(
    record: RunRecord,
    stores: dict[str, CheckpointStore],
    judge: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    goodput: Callable[[float], dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """The run's result; ``judge``: its chaos.objectives, judged on the rest; ``goodput``:
    the goodput block of the run up to the moment it is given."""
    final = record.final or {}
    newest = None if final.get("final_checkpoint") else _newest_signed(record.run_id, stores, record.region)
    last_step = steps_done([a.get("last_step") or 0 for a in record.attempts], None if newest is None else newest[0])
    finished = time.time()
    return {
        "run_id": record.run_id,
        "status": record.status,
        "reason": record.reason,
        "region": record.region,
        "final_step": final.get("final_step", last_step),
        "metrics": final.get("metrics", {}),
        "final_checkpoint": final.get("final_checkpoint") or (None if newest is None else newest[1]),
        # job.train_func too: the model's tensors in its final checkpoint, however they were saved.
        "weights_sha256": final.get("weights_sha256"),
        # job.train_func: sha256 over the final checkpoint's "<file> <sha256>" lines; a search over
        # one: its best trial's newest checkpoint's, as trials[].checkpoint_sha256.
        "checkpoint_sha256": final.get("checkpoint_sha256"),
        "attempts": len(record.attempts),
        "attempt_history": record.attempts,
        "incidents": [i.record() for i in record.incidents],
        "error_traceback": record.error_traceback,
        # A run the workload's own code failed: {"error", "step", "site"} (the user's file:line); else null.
        "user_error": record.user_error,
        "train_steps_per_s": final.get("train_steps_per_s"),
        # Median seconds a checkpoint's snapshot blocked the training loop (rank 0; built-in loop).
        "checkpoint_stall_s": final.get("checkpoint_stall_s"),
        # Bytes of parameters and optimizer state rank 0 held (its shards alone under fsdp; built-in loop).
        "state_bytes_per_rank": final.get("state_bytes"),
        # Per worker (CPU, peak RSS, network bytes, samples/s; GPU through NVML or why absent);
        # in a search, per worker of each trial (trial_id, trial_rank).
        "telemetry": final.get("telemetry"),
        # A search (hpo.enabled): the winning trial and every trial's outcome (each one's
        # checkpoint: where its final weights are).
        **(
            {"best_trial": final.get("best_trial"), "trials": final.get("trials", []), "search": final.get("search")}
            if "trials" in final
            else {}
        ),
        # chaos.objectives, judged: {"met", "checked": [{objective, limit, measured, met}]}; null when none are set.
        "objectives": _judged(record, judge),
        # Where the wall time went (seconds by category: productive, retrained, checkpoint_stall, restore,
        # startup, provisioning, waiting_for_capacity, failure_detection, orchestration; goodput = productive /
        # wall_s), node-hours by region and their cost in USD (null where a region has no price); null when the
        # journal cannot be read. See the observability guide.
        "goodput": goodput(finished) if goodput is not None else None,
        "started_at": record.started_at,
        "finished_at": finished,
        "duration_s": round(finished - record.started_at, 3),
    }


def _judged(
    record: RunRecord, judge: Callable[[dict[str, Any]], dict[str, Any] | None] | None
) -> dict[str, Any] | None:
    if judge is None or record.status not in ("SUCCEEDED", "FAILED"):
        return None
    incidents = [i.record() for i in record.incidents]
    return judge({"status": record.status, "incidents": incidents, **(record.final or {})})


def write_result(
    run_dir: str,
    record: RunRecord,
    stores: dict[str, CheckpointStore],
    judge: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    result = build_result(record, stores, judge, goodput=lambda finished: _goodput(run_dir, finished))
    write_private(rundir.result_path(run_dir), (json.dumps(result, indent=2) + "\n").encode())
    return result


def withdraw_result(run_dir: str) -> None:
    """An interrupted run taken on again is not ended any more: its result.json goes
    (the journal keeps the interruption) until the run ends again and writes a new one."""
    try:
        os.unlink(rundir.result_path(run_dir))
    except FileNotFoundError:
        pass


_NUMBER = (int, float)
_NONE = type(None)
# What status, report and a new run with the same run_id take from result.json.
RESULT_FIELDS: dict[str, tuple[type, ...]] = {
    "status": (str,),
    "final_step": (int, _NONE),
    "final_checkpoint": (str, _NONE),
    "metrics": (dict,),
    "incidents": (list,),
    "attempts": (int,),
    "duration_s": _NUMBER,
}
RESULT_OPTIONAL: dict[str, tuple[type, ...]] = {
    "reason": (str, _NONE),
    "weights_sha256": (str, _NONE),
    "checkpoint_sha256": (str, _NONE),
    "error_traceback": (str, _NONE),
    "user_error": (dict, _NONE),
    "objectives": (dict, _NONE),
    "goodput": (dict, _NONE),
}
# The statuses a result.json may hold: the run ended (CANCELLED: by action=cancel), or
# (INTERRUPTED) it stopped on Ctrl-C, SIGTERM or action=stop and waits for action=resume.
RESULT_STATES = ("SUCCEEDED", "FAILED", "INTERRUPTED", "CANCELLED")


def shown_total(result: Mapping[str, Any], total: int | None) -> int | None:
    """The total to show beside an ended run's final step: ``total`` (what its progress
    reported, or its config's), except for a search that succeeded, whose total is the
    search steps it took. Its planned total counts every trial to max_t, which a scheduler
    that stops trials early never reaches."""
    step = result.get("final_step")
    if result.get("status") == "SUCCEEDED" and "trials" in result and isinstance(step, int):
        return step
    return total


def read_result(run_dir: str) -> dict[str, Any] | None:
    """The run's result.json, or None before the run ended; DamagedFile if it is not one we wrote."""
    path = rundir.result_path(run_dir)
    try:
        result = load_json(path)
    except FileNotFoundError:
        return None
    problem = shape_problem(result, RESULT_FIELDS, RESULT_OPTIONAL)
    if problem is None and result["status"] not in RESULT_STATES:
        problem = f"has status {str(result['status'])[:40]!r}, none of {', '.join(RESULT_STATES)}"
    if problem is None:
        problem = next(
            (
                f"incident {i} {p}"
                for i, inc in enumerate(result["incidents"])
                if (p := shape_problem(inc, {"kind": (str,), "from_region": (str,)}, OPTIONAL_FIELDS)) is not None
            ),
            None,
        )
    if problem is not None:
        raise DamagedFile(path, f"{problem}; the file is damaged or was edited")
    return result
