"""``detach=true``: the run's controller in the background, away from this terminal.

The same command line, without ``detach=true`` and with a fixed ``run_id``, runs as a
child in a session of its own (no controlling terminal: closing this one sends it no
SIGHUP), stdin from /dev/null, its output appended to ``controller.log`` in the run
folder. This command returns once the child's first attempt has started (or the run has
ended already), printing the run id and the commands that follow, stop and resume it.
A child that exits before then has its last lines shown and its exit status returned.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.commands.run import SUPERVISE_ENV
from orchestrator.commands.status import resume_line
from orchestrator.commands.watch import JournalTail
from orchestrator.config.schema import Config
from orchestrator.errors import error, printable
from orchestrator.runstate import rundir
from orchestrator.runstate.events import AttemptAdopted, AttemptStarted, Event
from orchestrator.runstate.runfiles import DamagedFile, open_fd, read_span
from recovery.controlkey import ControlKeyError, key_for

LOG_NAME = rundir.CONTROLLER_LOG
WAIT_S = 60.0  # for the first attempt to start; the controller goes on regardless
POLL_S = 0.2
TAIL_BYTES = 2000


def child_argv(args: Sequence[str], run_id: str) -> list[str]:
    """The controller's command line: the user's, less ``detach`` and ``run_id``, plus
    the run id chosen here (so this side knows the run folder before the child does)."""
    kept = [a for a in args if a.lstrip("+~").split("=", 1)[0] not in ("detach", "run_id")]
    return [sys.executable, "-m", "orchestrator", *kept, f"run_id={run_id}"]


def started(events: Sequence[Event]) -> bool:
    """Whether the child has begun an attempt of its own (events read since it started)."""
    return any(isinstance(ev, AttemptStarted | AttemptAdopted) for ev in events)


def tail_text(path: str, limit: int = TAIL_BYTES) -> str:
    """The end of ``path``, control characters shown, not obeyed."""
    try:
        size = os.lstat(path).st_size
        text = read_span(path, max(0, size - limit), limit).decode("utf-8", "replace")
    except (OSError, DamagedFile):
        return ""
    return "\n".join(printable(line) for line in text.splitlines())


@dataclass(frozen=True)
class Detached:
    """What starting a run's controller in the background came to: ``code`` None while
    it goes on (``started``: its first attempt began within the wait); else the exit
    status it makes and ``said``, one line why nothing started (``pid`` None) or the
    child's last lines (it ended before an attempt of its own)."""

    run_id: str
    log_path: str
    pid: int | None = None  # the supervisor's
    started: bool = False
    code: int | None = None
    said: str = ""


def start(cfg: Config, args: Sequence[str], run_id: str, wait_s: float = WAIT_S) -> Detached:
    """The run's supervisor started in the background with ``args`` (the command line's
    words), and a bounded wait for its first attempt; what the command line and the
    Python API (``orchestrator.api``) both launch with."""
    home = cfg.home_path
    run_dir = rundir.run_path(home, run_id)
    log_path = os.path.join(run_dir, LOG_NAME)
    if cfg.action == "resume" and not os.path.lexists(rundir.journal_path(run_dir)):
        return Detached(run_id, log_path, code=2, said=f"run_id: no run named {run_id!r} under {home}")
    try:
        # Checked here, before the run's folder is made, as the foreground run does; on a
        # copy of the environment, since the child reads it again (an env: key stays for it).
        key_for(cfg.cloud.control_store, cfg.cloud.control_key, dict(os.environ))
    except ControlKeyError as exc:
        return Detached(run_id, log_path, code=2, said=str(exc))
    rundir.make_run_dir(run_dir)
    journal = JournalTail(rundir.journal_path(run_dir))
    journal.read()  # a resumed run's earlier attempts are not this child's
    log_fd = open_fd(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        # The child is the run's supervisor (orchestrator.commands.run.supervise): it runs the
        # controller and resumes it if it dies, recovery.controller_restarts times at most.
        child = subprocess.Popen(
            child_argv(args, run_id),
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, SUPERVISE_ENV: "1"},
        )
    finally:
        os.close(log_fd)
    seen: list[Event] = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not started(seen):
        code = child.poll()
        seen += journal.read()
        if code is not None and not started(seen):
            # Ended before an attempt of its own: refused, or a run that had nothing left to do.
            return Detached(run_id, log_path, child.pid, code=code, said=tail_text(log_path))
        time.sleep(POLL_S)
    return Detached(run_id, log_path, child.pid, started=started(seen))


def main(cfg: Config, args: Sequence[str], run_id: str, wait_s: float = WAIT_S) -> int:
    home = cfg.home_path
    done = start(cfg, args, run_id, wait_s)
    if done.code is not None and done.pid is None:
        return error(done.said)
    if done.code is not None:
        print(done.said, file=sys.stderr)
        return done.code
    state = "started" if done.started else "still starting"
    where = f"run_id={run_id} home={shlex.quote(home)}"
    print(f"run {run_id} {state} in the background (supervisor pid {done.pid}; its output: {done.log_path})")
    print(f"  follow it:  python -m orchestrator action=watch {where}")
    print(f"  its logs:   python -m orchestrator action=logs {where} follow=true")
    print(f"  stop it:    python -m orchestrator action=stop {where}")
    print(f"  go on after a stop: {resume_line(home, run_id)}")
    return 0
