"""``action=resume`` on a machine that has no folder for the run: the run's folder rebuilt
from the control store's mirror (orchestrator/control/mirror.py), after which resume goes
on as it does on the run's own machine (adopting the attempt still training, or tearing
down what it finds and starting the next).

What it needs, and nothing else: the control store (``cloud.control_store`` and
``cloud.control_options`` on the command line) and the user's control key
(``cloud.control_key``), from which the run's secret is derived again. The mirror is
trusted only when its index verifies under that secret; a controller whose lease still
holds refuses the takeover before anything is written here.
"""

from __future__ import annotations

import os
import time
from typing import Any

from orchestrator.control.controlstate import run_root
from orchestrator.control.lease import ControllerLease, LeaseHeld, holder_running, refusal
from orchestrator.control.mirror import MirrorError, Restored, read_mirror
from orchestrator.runstate import rundir
from orchestrator.runstate.events import MirrorRestored
from recovery.controlkey import read_key
from recovery.fsio import write_private
from recovery.signing import derive_state_key, load_or_create_secret, secret_from_key


class TakeoverError(RuntimeError):
    """The run cannot be taken over from the control store; one line saying why and what to do."""


def rebuild(cli: Any, run_id: str, run_dir: str, control_key: bytes | None = None) -> MirrorRestored:
    """The run's folder under ``run_dir`` from the mirror, with its secret derived from the
    control key (``control_key`` as the command read it; None reads it here); the journal
    line that says so. TakeoverError, LeaseHeld or ControlKeyError (one line) otherwise,
    with nothing written."""
    from recovery.storage import open_fs

    store = cli.cloud.control_store
    key = control_key if control_key is not None else read_key(cli.cloud.control_key)
    if key is None:
        raise TakeoverError(
            f"run_id: no run {run_id!r} under {cli.home_path}; to take it over from {store}, give the "
            f"control key its controller had ({cli.cloud.control_key} is unset)"
        )
    secret = secret_from_key(key, run_id)
    state_key = derive_state_key(secret, run_id)
    try:
        fs, root = open_fs(run_root(store, run_id), dict(cli.cloud.control_options or {}))
        lease = ControllerLease(fs, root, state_key, run_id, float(cli.recovery.controller_lease_s))
        current = lease.read()
        why = refusal(current, time.time(), running=holder_running(current))
        if why is not None:
            raise LeaseHeld(f"run {run_id} is {why}")
        restored = read_mirror(fs, root, state_key, run_id)
    except (LeaseHeld, MirrorError):
        raise
    except Exception as exc:
        raise TakeoverError(
            f"cloud.control_store: cannot read run {run_id!r} from {store} ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    _write(run_dir, restored, secret)
    return MirrorRestored(
        controller=restored.controller,
        seq=restored.seq,
        written_at=restored.written_at,
        files=tuple(sorted(restored.files)),
        skipped=tuple(s[:300] for s in restored.skipped[:20]),
    )


def _write(run_dir: str, restored: Restored, secret: bytes) -> None:
    rundir.make_run_dir(run_dir)
    load_or_create_secret(run_dir, secret)
    for name, data in restored.files.items():
        write_private(os.path.join(run_dir, name), data)


def describe_error(exc: Exception, store: str) -> str:
    if isinstance(exc, MirrorError):
        return f"cloud.control_store: {store} {exc}"
    return str(exc)
