"""``action=stop``: ask a run's live controller to stop it as Ctrl-C would (INTERRUPTED,
clusters torn down, checkpoints kept; action=resume goes on); ``action=cancel``: the same
way, to end it for good (CANCELLED: action=resume refuses it). Through a request file in
the run's folder (``orchestrator.control.stopreq``), then a bounded wait for it.

Only a run whose controller holds its lock is asked: a run already ended or whose
controller died is told as such, with the command that goes on from there.
"""

from __future__ import annotations

import os
import sys
import time

from orchestrator.commands.status import resume_line
from orchestrator.control.stopreq import request_path, this_request, write_request
from orchestrator.errors import error
from orchestrator.runstate import rundir
from orchestrator.runstate.result import read_result

WAIT_S = 120.0  # for the controller to tear its clusters down and write result.json
POLL_S = 0.2


def main(home: str, run_id: str, wait_s: float = WAIT_S, action: str = "stop") -> int:
    run_dir = rundir.run_path(home, run_id)
    resume = resume_line(home, run_id)
    if not os.path.lexists(rundir.journal_path(run_dir)):
        return error(f"run_id: no run named {run_id!r} under {home}")
    done = read_result(run_dir)
    if done is not None and not (action == "cancel" and done["status"] == "INTERRUPTED"):
        print(f"run {run_id} already ended ({done['status']}); nothing to {action}", file=sys.stderr)
        return 0
    if done is not None:
        return error(
            f"run {run_id} is interrupted and nothing runs it; leave it, or go on with: {resume} "
            "(then action=cancel ends it for good)"
        )
    alive = rundir.controller_alive(run_dir)
    if alive is False:
        return error(f"run {run_id}: its controller is not running (it died); go on with: {resume}")
    if alive is None:
        return error(f"run {run_id}: cannot tell whether its controller runs ({rundir.LOCK_NAME} cannot be opened)")
    req = this_request(action)
    write_request(run_dir, req)
    print(f"run {run_id}: {action} asked ({req.who()}); waiting for its controller", file=sys.stderr)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        done = read_result(run_dir)
        alive = rundir.controller_alive(run_dir)
        # Stopped once the controller is gone too: its last lines written, its lock free.
        if done is not None and (alive is not True or time.monotonic() > deadline - POLL_S):
            print(
                f"run {run_id}: {done['status']}; go on with: {resume}"
                if done["status"] == "INTERRUPTED"
                else f"run {run_id}: {done['status']}"
            )
            return 0
        if done is None and alive is False:
            return error(f"run {run_id}: its controller ended without a result; go on with: {resume}")
        time.sleep(POLL_S)
    left = " (the request is still waiting)" if os.path.exists(request_path(run_dir)) else ""
    verb = "cancelled" if action == "cancel" else "stopped"
    return error(f"run {run_id}: not {verb} after {wait_s:.0f}s{left}; see action=status run_id={run_id}")
