"""Runs in a control store as a controller leaves them, without Ray: a run folder written
the way the controller writes one (typed events through ``Journal.emit``, config.json,
result.json through ``write_result``, the loss series), mirrored to a ``file://``
control store with ``StateMirror`` under the state key derived from a control key, and
the lease its controller holds while it lives. For the tests and the benchmark of
orchestrator/commands/remote.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.control.controlstate import run_root
from orchestrator.control.lease import ControllerLease
from orchestrator.control.mirror import StateMirror
from orchestrator.runstate import events as E
from orchestrator.runstate.journal import Journal, read_typed
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.losses import append_losses
from orchestrator.runstate.result import record_from, write_result
from orchestrator.runstate.state import fold
from recovery.signing import derive_state_key, secret_from_key


def config_of(job: str, store: str, steps: int = 500) -> dict[str, Any]:
    return {
        "job": {"name": job, "steps": steps},
        "cloud": {"name": "local", "control_store": store, "control_options": {}},
    }


def write_run(
    home: Path,
    run_id: str,
    store: str,
    *,
    job: str = "digits",
    ended: str | None = "SUCCEEDED",
    steps: int = 500,
    losses: int = 0,
) -> Path:
    """A run folder under ``home``: started, provisioned, training; ``ended``: finished so
    (SUCCEEDED or FAILED, with result.json), None: still going (no result.json)."""
    run_dir = home / "runs" / run_id
    config = config_of(job, store, steps)
    j = Journal(str(run_dir / "journal.jsonl"))
    last = steps if ended == "SUCCEEDED" else steps // 2
    with j.batch():
        for event in (
            E.RunStarted(run_id=run_id, pid=1, config=config, host="elsewhere"),
            E.Transition(RunState.PROVISIONING, RunState.PENDING),
            E.AttemptStarted(1, "local-a"),
            E.Provisioned(region="local-a", cluster=f"{run_id}-g1", generation=1, provision_s=3.0),
            E.Transition(RunState.RUNNING, RunState.PROVISIONING),
        ):
            j.emit(event)
        if ended is not None:
            j.emit(E.AttemptEnded(1, "local-a", last_step=last))
            reason = "no region left to fail over to" if ended == "FAILED" else None
            j.emit(E.Transition(RunState(ended), RunState.RUNNING, reason=reason))
    (run_dir / "config.json").write_text(json.dumps(config))
    if losses:
        points = [{"generation": 1, "region": "local-a", "step": s, "loss": 2.0 / (1 + s)} for s in range(losses)]
        append_losses(str(run_dir), points)
    if ended is not None:
        view = fold(read_typed(str(run_dir / "journal.jsonl")))
        final = {"final_step": last, "metrics": {"accuracy": 0.9}}
        result = write_result(str(run_dir), record_from(view, run_id, final, view.started_at or 0.0), {})
        j.emit(E.RunFinished(status=result["status"], final_step=result["final_step"]))
    return run_dir


def state_key(control_key: bytes, run_id: str) -> bytes:
    return derive_state_key(secret_from_key(control_key, run_id), run_id)


def mirror(run_dir: Path, store: str, control_key: bytes, controller: int = 1) -> None:
    """The run's folder mirrored to ``store`` as its controller ``controller`` mirrors it."""
    from recovery.storage import open_fs

    run_id = run_dir.name
    fs, root = open_fs(run_root(store, run_id))
    StateMirror(fs, root, state_key(control_key, run_id), run_id, controller, str(run_dir)).flush()


def hold_lease(store: str, control_key: bytes, run_id: str, ttl_s: float = 600.0) -> ControllerLease:
    """The lease a live controller of the run holds in the store."""
    from recovery.storage import open_fs

    fs, root = open_fs(run_root(store, run_id))
    lease = ControllerLease(fs, root, state_key(control_key, run_id), run_id, ttl_s, sleep=lambda s: None)
    lease.take()
    return lease
