"""A Ray Train worker's own output, kept in its rank's file on the node.

Ray writes a worker's stdout and stderr to files named after its worker id and pid,
under a session folder that goes with the cluster. A worker knows its rank, so it
points both descriptors at ``<log_dir>/rank-<R>.log`` itself, appending (a worker
Ray Train restarts in place goes on in the same file): whatever the process writes
from then on lands there, the user's ``print`` and ``logging``, a C extension's
output and the last words of a crash included, with nothing between the process and
the file that could lose them. The provider keeps a copy before the cluster goes
(orchestrator/wire/logfiles.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from orchestrator.wire.logfiles import rank_file

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def capture(log_dir: str | None, rank: int, generation: int) -> str | None:
    """From here on, this process's stdout and stderr append to its rank's file in
    ``log_dir``; the file's path, or None (no log_dir, or a file that cannot be opened:
    the worker trains on, its output left where Ray put it)."""
    if not log_dir:
        return None
    path = os.path.join(log_dir, rank_file(rank))
    try:
        os.makedirs(log_dir, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        print(f"orchestrator: rank {rank}: its output cannot go to {path}: {exc}", file=sys.stderr)
        return None
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        # Line by line: a process killed mid-run (a fault, the OOM killer) leaves no
        # buffered line unwritten.
        with contextlib.suppress(Exception):
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    user_logging()
    sys.stderr.write(f"--- orchestrator: attempt {generation}, rank {rank}, pid {os.getpid()}\n")
    return path


def user_logging() -> None:
    """The user's ``logging`` reaches the file: Ray Train configures the root logger of
    its workers (INFO, to stderr); where nothing did, the root logger gets a handler to
    stderr at INFO, as a plain script's ``logging.basicConfig`` would."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
