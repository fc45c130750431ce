"""``action=drill run_id=X fault=<kind> [region=...]``: inject a fault into a run that is
training now (detached or not), through the same path as ``chaos.faults``.

The fault is checked against the run's own saved config as a ``chaos.faults`` entry
would be, then asked of the run's live controller through a request file in the run's
folder (``drill.request``, as action=stop's: only the run's owner can write it). The
controller checks it again, journals ``drill_requested`` with who asked, and injects it
into the running attempt at once; what follows (the failover, the restart) is the run's
as for any fault. The command waits for the controller's answer and prints it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from orchestrator.commands.status import resume_line
from orchestrator.commands.stop import Asked
from orchestrator.commands.watch import JournalTail
from orchestrator.config.saved import config_from_plain
from orchestrator.config.schema import Config, FaultConfig
from orchestrator.config.validate_chaos import validate_chaos
from orchestrator.control.stopreq import DRILL_NAME, request_path, this_request, write_request
from orchestrator.errors import ConfigError, error
from orchestrator.runstate import rundir
from orchestrator.runstate.events import DrillRequested, FaultInjected
from orchestrator.runstate.journal import load_object
from orchestrator.runstate.result import read_result
from orchestrator.wire.faults import DRILL_FAULTS, FaultKind
from providers.registry import check_faults

WAIT_S = 60.0  # for the controller's answer: it looks every 0.2 s while an attempt trains
POLL_S = 0.2


def ask(home: str, run_id: str, kind: str, region: str | None = None, source: str = "cli") -> Asked:
    """The fault ``kind`` (in ``region``, default the run's) asked of the run's live
    controller through its drill.request, checked first against the run's saved config;
    without waiting. A run it cannot be asked of is told why (``source``: where the drill
    was asked, which the controller journals with it: the command line or the console)."""
    if kind not in DRILL_FAULTS:  # the command line's validate says so first
        return Asked(None, f"fault: got {kind[:64]!r}; a drill injects one of: {', '.join(DRILL_FAULTS)}", 2)
    run_dir = rundir.run_path(home, run_id)
    if not os.path.lexists(rundir.journal_path(run_dir)):
        return Asked(None, f"run_id: no run named {run_id!r} under {home}", 2)
    done = read_result(run_dir)
    if done is not None:
        return Asked(None, f"run {run_id} already ended ({done['status']}); a drill needs a run that trains", 2)
    alive = rundir.controller_alive(run_dir)
    if alive is False:
        return Asked(
            None, f"run {run_id}: its controller is not running (it died); go on with: {resume_line(home, run_id)}", 2
        )
    if alive is None:
        return Asked(
            None, f"run {run_id}: cannot tell whether its controller runs ({rundir.LOCK_NAME} cannot be opened)", 2
        )
    fault: dict[str, Any] = {"kind": kind}
    if region:
        fault["region"] = region
    config = rundir.config_path(run_dir)
    try:
        problem = config_problem(load_object(config), fault)
    except FileNotFoundError:
        return Asked(None, f"{config}: missing, so the drill cannot be checked; the run's folder is damaged", 2)
    except ConfigError as exc:
        return Asked(None, f"{config}: {exc}", 2)
    if problem is not None:
        return Asked(None, problem, 2)
    req = this_request("drill", fault, source=source)
    write_request(run_dir, req, DRILL_NAME)
    return Asked(req)


def main(cli: Config) -> int:
    home, run_id = cli.home_path, str(cli.run_id)
    run_dir = rundir.run_path(home, run_id)
    asked = ask(home, run_id, str(cli.fault), cli.region)
    req = asked.request
    if req is None or req.fault is None:
        return error(asked.said)
    fault = req.fault
    print(f"run {run_id}: drill {fault['kind']} asked ({req.who()}); waiting for its controller", file=sys.stderr)
    answer = wait_answer(run_dir, req.who(), WAIT_S)
    if answer is None:
        left = " (the request is still waiting)" if os.path.exists(request_path(run_dir, DRILL_NAME)) else ""
        return error(
            f"run {run_id}: no answer to the drill after {WAIT_S:.0f}s{left}; see action=status run_id={run_id}"
        )
    answered, injected = answer
    if answered.refused:
        return error(f"run {run_id}: drill {answered.kind} refused: {answered.refused}")
    at = "" if injected is None or injected.step is None else f" at step {injected.step}"
    print(
        f"run {run_id}: {answered.kind} injected{at} in {answered.region}; follow it with: action=watch run_id={run_id}"
    )
    return 0


def config_problem(saved: Any, fault: dict[str, Any]) -> str | None:
    """Why ``fault`` cannot strike the run its saved config describes, as a chaos.faults
    entry with a timed trigger is checked (one line naming the key), or None."""
    cfg = config_from_plain(saved)
    kind = FaultKind(fault["kind"])
    # A drill strikes now; kill_worker's check is a step trigger's (it meets no rendezvous,
    # the controller names its victim from the group's train_started).
    when: dict[str, Any] = {"at_step": 1} if kind == FaultKind.kill_worker else {"after_s": 1.0}
    cfg.chaos.faults = [FaultConfig(kind=kind, region=fault.get("region"), **when)]
    try:
        validate_chaos(cfg)
        check_faults(cfg)
    except ConfigError as exc:
        key = "region" if exc.key.endswith(".region") else "fault"
        return f"{key}: {str(exc).split(': ', 1)[1]}"
    return None


def wait_answer(run_dir: str, who: str, wait_s: float) -> tuple[DrillRequested, FaultInjected | None] | None:
    """The controller's drill_requested for the request ``who`` made, and the fault_injected
    after it (None: refused, or not journaled yet when the wait ended); None without one."""
    deadline = time.monotonic() + wait_s
    tail = JournalTail(rundir.journal_path(run_dir))  # each poll reads only what was appended
    asked: DrillRequested | None = None
    while time.monotonic() < deadline:
        for event in tail.read():
            if isinstance(event, DrillRequested) and event.who == who:
                asked = event
            elif asked is not None and not asked.refused and isinstance(event, FaultInjected):
                return asked, event
        if asked is not None and (asked.refused or time.monotonic() > deadline - 1.0):
            return asked, None
        time.sleep(POLL_S)
    return None
