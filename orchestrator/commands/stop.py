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
from dataclasses import dataclass
from typing import Any

from orchestrator.commands.status import resume_line
from orchestrator.control.stopreq import StopRequest, request_path, this_request, write_request
from orchestrator.errors import error
from orchestrator.runstate import rundir
from orchestrator.runstate.result import read_result

WAIT_S = 120.0  # for the controller to tear its clusters down and write result.json
POLL_S = 0.2


@dataclass(frozen=True)
class Asked:
    """What asking a run's controller came to: the request written (None: none was),
    else one line saying why not, and the exit status it makes (0: nothing to do)."""

    request: StopRequest | None
    said: str = ""
    code: int = 0


def ask(home: str, run_id: str, action: str = "stop", source: str = "cli") -> Asked:
    """``action`` (stop or cancel) asked of the run's live controller through its request
    file, without waiting; a run that has none to ask is told why (``source``: where the
    request was made, which the journal names: the command line or the console)."""
    run_dir = rundir.run_path(home, run_id)
    resume = resume_line(home, run_id)
    if not os.path.lexists(rundir.journal_path(run_dir)):
        return Asked(None, f"run_id: no run named {run_id!r} under {home}", 2)
    done = read_result(run_dir)
    if done is not None and not (action == "cancel" and done["status"] == "INTERRUPTED"):
        return Asked(None, f"run {run_id} already ended ({done['status']}); nothing to {action}", 0)
    if done is not None:
        return Asked(
            None,
            f"run {run_id} is interrupted and nothing runs it; leave it, or go on with: {resume} "
            "(then action=cancel ends it for good)",
            2,
        )
    alive = rundir.controller_alive(run_dir)
    if alive is False:
        return Asked(None, f"run {run_id}: its controller is not running (it died); go on with: {resume}", 2)
    if alive is None:
        return Asked(
            None, f"run {run_id}: cannot tell whether its controller runs ({rundir.LOCK_NAME} cannot be opened)", 2
        )
    req = this_request(action, source=source)
    write_request(run_dir, req)
    return Asked(req)


@dataclass(frozen=True)
class Ended:
    """What waiting for a stopped run came to: its result.json once the controller let the
    run go, else (None) one line saying why not."""

    result: dict[str, Any] | None
    said: str = ""


def await_end(home: str, run_id: str, wait_s: float = WAIT_S, action: str = "stop") -> Ended:
    """A bounded wait for the run's controller to end the run it was asked to stop (or
    cancel): the command line's and the Python API's (``orchestrator.api``)."""
    run_dir = rundir.run_path(home, run_id)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        done = read_result(run_dir)
        alive = rundir.controller_alive(run_dir)
        # Stopped once the controller is gone too: its last lines written, its lock free.
        if done is not None and (alive is not True or time.monotonic() > deadline - POLL_S):
            return Ended(done)
        if done is None and alive is False:
            return Ended(
                None, f"run {run_id}: its controller ended without a result; go on with: {resume_line(home, run_id)}"
            )
        time.sleep(POLL_S)
    left = " (the request is still waiting)" if os.path.exists(request_path(run_dir)) else ""
    verb = "cancelled" if action == "cancel" else "stopped"
    return Ended(None, f"run {run_id}: not {verb} after {wait_s:.0f}s{left}; see action=status run_id={run_id}")


def main(home: str, run_id: str, wait_s: float = WAIT_S, action: str = "stop") -> int:
    resume = resume_line(home, run_id)
    asked = ask(home, run_id, action)
    req = asked.request
    if req is None:
        if asked.code == 0:
            print(asked.said, file=sys.stderr)
            return 0
        return error(asked.said)
    print(f"run {run_id}: {action} asked ({req.who()}); waiting for its controller", file=sys.stderr)
    ended = await_end(home, run_id, wait_s, action)
    done = ended.result
    if done is None:
        return error(ended.said)
    print(
        f"run {run_id}: {done['status']}; go on with: {resume}"
        if done["status"] == "INTERRUPTED"
        else f"run {run_id}: {done['status']}"
    )
    return 0
