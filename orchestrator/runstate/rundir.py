"""A run's folder on the controller's machine: the controller's alone, but for the
control channel, which the attempt's runtime writes.

On this machine the process's umask (0077, set by the command) makes everything
private. A run's home on a shared filesystem (on-prem, where the nodes' user writes the
control channel and the stores) may instead carry a default ACL that grants the nodes'
user everything below it, and a default ACL overrides the umask. So the run folder is
made traversable only (0711: the nodes reach the control channel, and can neither list,
create, rename nor delete anything else), its inherited default ACL is dropped (what the
controller writes inside is then its own: journal, config.json, result.json, specs,
reports), and the control folder alone takes the inherited ACL back.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from typing import IO

from orchestrator.runstate.runfiles import check_names, open_fd
from recovery.fsio import make_dirs
from recovery.signing import SECRET_FILE

# Every name in a run's folder, <home>/runs/<run_id>/, spelled here alone.
RUNS_DIR = "runs"
JOURNAL_NAME = "journal.jsonl"
CONFIG_NAME = "config.json"
RESULT_NAME = "result.json"
LOSS_NAME = "loss.jsonl"
NOTIFY_SECRET = "notify.secret"
TB_DIR = "tensorboard"
# A plan's task YAMLs: <home>/plans/<run_id>/, beside runs/, since a plan is no run (action=list
# lists every folder under runs/).
PLANS_DIR = "plans"
CONTROL_DIR = "control"
LOCK_NAME = "controller.lock"
# Held by a detached run's supervisor (orchestrator.commands.run.supervise) while it lives.
SUPERVISOR_LOCK = "supervisor.lock"
# Each attempt's folder: attempts/g<generation>/ holds its runtime spec, the driver's
# log and, once its cluster is torn down, the copies of its ranks' logs.
ATTEMPTS_DIR = "attempts"
DRIVER_LOG = "runtime.log"
# action=stop's and action=cancel's request, and action=drill's (orchestrator.control.stopreq).
STOP_NAME = "stop.request"
DRILL_NAME = "drill.request"
# A detached run's output (orchestrator.commands.detach), and action=report's.
CONTROLLER_LOG = "controller.log"
REPORT_TEXT = "report.txt"
REPORT_PLOT = "report.png"
# Each a regular file or nothing: anything else there (a FIFO, a folder, a symlink) is refused.
RUN_FILES = (
    LOCK_NAME,
    SUPERVISOR_LOCK,
    JOURNAL_NAME,
    RESULT_NAME,
    CONFIG_NAME,
    STOP_NAME,
    DRILL_NAME,
    SECRET_FILE,
    NOTIFY_SECRET,
    LOSS_NAME,
    CONTROLLER_LOG,
    REPORT_TEXT,
    REPORT_PLOT,
)


def check_run_folder(run_dir: str) -> None:
    """DamagedFile naming the first of the run's files (RUN_FILES) that is there and is no
    regular file. Every action that names a run asks this first, so that it refuses such
    a folder in one line before it reads, locks or writes anything in it."""
    check_names(run_dir, RUN_FILES)


def runs_path(home: str) -> str:
    """The folder that holds every run under ``home``."""
    return os.path.join(home, RUNS_DIR)


def run_path(home: str, run_id: str) -> str:
    """A run's folder under ``home``."""
    return os.path.join(home, RUNS_DIR, run_id)


def plan_path(home: str, run_id: str) -> str:
    """Where ``action=plan`` writes the task YAMLs of ``run_id``'s placements."""
    return os.path.join(home, PLANS_DIR, run_id)


def journal_path(run_dir: str) -> str:
    return os.path.join(run_dir, JOURNAL_NAME)


def config_path(run_dir: str) -> str:
    return os.path.join(run_dir, CONFIG_NAME)


def result_path(run_dir: str) -> str:
    return os.path.join(run_dir, RESULT_NAME)


_DEFAULT_ACL = "system.posix_acl_default"
_ACCESS_ACL = "system.posix_acl_access"
# No ACL there, or a filesystem (or kernel) without them: nothing to take away.
_NO_ACL = (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP)


def make_run_dir(run_dir: str) -> None:
    """Create ``run_dir`` (and its missing parents, 0711 too), without the default ACL
    it would inherit; an existing run folder is left as it is."""
    if not os.path.isdir(run_dir):
        make_dirs(run_dir, 0o711)
        _drop_default_acl(run_dir)


def make_control_dir(run_dir: str) -> str:
    """The run's control folder on this machine (when no control store is set): the one
    place under the run folder the nodes' user may write. It takes the default ACL the
    run folder was denied (its parent's), so what either side creates there stays
    readable and writable by the other."""
    control = os.path.join(run_dir, CONTROL_DIR)
    if os.path.isdir(control):
        return control
    os.mkdir(control, 0o700)
    try:
        inherited = os.getxattr(os.path.dirname(os.path.abspath(run_dir)), _DEFAULT_ACL)
    except OSError as exc:
        if exc.errno in _NO_ACL:
            return control
        raise
    os.setxattr(control, _DEFAULT_ACL, inherited)
    os.setxattr(control, _ACCESS_ACL, inherited)
    return control


def attempt_dir(run_dir: str, generation: int) -> str:
    return os.path.join(run_dir, ATTEMPTS_DIR, f"g{int(generation)}")


def _drop_default_acl(path: str) -> None:
    try:
        os.getxattr(path, _DEFAULT_ACL)
    except OSError as exc:
        if exc.errno in _NO_ACL:
            return
        raise
    with contextlib.suppress(OSError):
        os.removexattr(path, _DEFAULT_ACL)
    # The access ACL the folder got from it holds the nodes' user too (its mask, from
    # the 0711 mode, already limits that to traversal); drop it to the mode alone.
    with contextlib.suppress(OSError):
        os.removexattr(path, _ACCESS_ACL)
    os.chmod(path, 0o711)


def lock_controller(run_dir: str, name: str = LOCK_NAME) -> IO[str] | None:
    """One controller per run: the lock on ``run_dir``'s controller.lock, held while the
    returned file stays open, or None when another process holds it. It goes with the
    process, a SIGKILL included, so a held lock is a live controller. (``name``: another
    lock of the same kind, a supervisor's.) DamagedFile when something other than a
    regular file has the lock's name: never followed, nothing is made where a link points."""
    make_run_dir(run_dir)
    fd = open_fd(os.path.join(run_dir, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    fh = os.fdopen(fd, "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


def controller_alive(run_dir: str, name: str = LOCK_NAME) -> bool | None:
    """Whether a controller holds the run's lock now; None when that cannot be told (the
    lock file cannot be opened). Creates nothing. The probe holds a shared lock for an
    instant: a controller taking the lock in that instant is told another one runs.
    (``name``: another lock of the same kind, a supervisor's.) DamagedFile when the lock's
    name holds something other than a regular file: no controller could hold that."""
    try:
        fd = open_fd(os.path.join(run_dir, name), os.O_RDONLY)
    except FileNotFoundError:
        return False  # no controller ever locked this run
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        return False
