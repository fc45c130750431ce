"""The unit tier's fixtures: real checkpoint stores on local disk and in fsspec memory
(tests/support/stores.py), compositions reused per command line (tests/support/composed.py),
and the tier's purity guard: no process, no socket, no Ray (those tests are tests/integration's)."""

from __future__ import annotations

import multiprocessing.process
import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

# urllib3 probes for IPv6 when it is first imported (a bind to ::1, port 0, closed at once):
# imported here, before the guard below, so which test imports it first does not matter.
import urllib3  # noqa: F401  # isort: skip
from tests.support import composed
from tests.support.stores import flip_byte, memory_url, run_key, store_url, write_checkpoint, write_torn


class ImpureUnitTest(RuntimeError):
    """What a unit test gets for starting a process, opening a socket or starting Ray."""


# What a unit test may not do, by the function that does it.
_FORBIDDEN: list[tuple[object, str, str]] = [
    (subprocess.Popen, "__init__", "starts a process (subprocess)"),
    (os, "fork", "forks a process (os.fork)"),
    (os, "forkpty", "forks a process (os.forkpty)"),
    (os, "posix_spawn", "starts a process (os.posix_spawn)"),
    (os, "posix_spawnp", "starts a process (os.posix_spawnp)"),
    (multiprocessing.process.BaseProcess, "start", "starts a process (multiprocessing)"),
    (socket.socket, "connect", "opens a socket (connect)"),
    (socket.socket, "connect_ex", "opens a socket (connect)"),
    (socket.socket, "bind", "opens a socket (bind)"),
]
_violations: list[str] = []


def _refusing(what: str):
    def refuse(*args: object, **kwargs: object) -> None:
        if _asks_fontconfig(args):
            # matplotlib's first import on a fresh machine lists the system's fonts with
            # fc-list to build its cache: answered as if fontconfig were absent, so it
            # falls back to its own fonts, with no process started.
            raise FileNotFoundError("fc-list (refused in the unit tier)")
        _violations.append(what)
        raise ImpureUnitTest(f"a unit test {what}: it belongs in tests/integration")

    return refuse


def _asks_fontconfig(args: tuple[object, ...]) -> bool:
    command = args[1] if len(args) > 1 else None
    return isinstance(command, list | tuple) and bool(command) and command[0] == "fc-list"


@pytest.fixture(autouse=True, scope="package")
def _no_process_socket_or_ray() -> Iterator[None]:
    """For the whole unit package, module-scoped fixtures included: each forbidden call
    raises. Package scope: a session that runs other tiers too gets them back after it."""
    with pytest.MonkeyPatch.context() as mp:
        for owner, name, what in _FORBIDDEN:
            mp.setattr(owner, name, _refusing(what))
        yield


@pytest.fixture(autouse=True)
def _pure(_no_process_socket_or_ray: None) -> Iterator[None]:
    """Fails the test that did a forbidden thing, also when the code under test caught the
    refusal. Ray's ``init`` is refused once Ray is imported: a local cluster starts
    processes (refused above), and connecting to one is a socket in Ray's C++ core."""
    _violations.clear()
    with pytest.MonkeyPatch.context() as mp:
        if "ray" in sys.modules:
            mp.setattr(sys.modules["ray"], "init", _refusing("starts Ray (ray.init)"))
        yield
    if _violations:
        pytest.fail(f"a unit test {_violations[0]}: it belongs in tests/integration", pytrace=False)


@pytest.fixture(autouse=True, scope="package")
def _compositions_reused() -> Iterator[None]:
    from orchestrator.config import compose

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compose, "compose_full", composed.memoized(compose.compose_full, compose.CONF_DIR))
        yield


__all__ = ["flip_byte", "memory_url", "run_key", "store_url", "write_checkpoint", "write_torn"]


@pytest.fixture
def sigint_default() -> Iterator[None]:
    """Python's own Ctrl-C handler for the test, given back after. A suite started in the
    background by a shell has SIGINT ignored, and then neither ``raise_signal`` nor
    ``_thread.interrupt_main`` raises KeyboardInterrupt."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
