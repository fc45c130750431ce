"""providers.warm: imports ahead, then runs the ``python -m`` command it is handed, as that command.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from providers.warm import EXIT_BAD_ORDER

pytestmark = pytest.mark.integration

PROBE = """
import os, sys

blocked = []
for tid in os.listdir("/proc/self/task"):
    if int(tid) == os.getpid():
        continue
    with open(f"/proc/self/task/{tid}/status") as fh:
        mask = next(int(l.split()[1], 16) for l in fh if l.startswith("SigBlk:"))
    blocked.append(bool(mask & (1 << (15 - 1))))
print("argv", sys.argv[1:], "pid", os.getpid(), "env", os.environ.get("PROBE_ENV"), "threads", blocked, flush=True)
print("to stderr", file=sys.stderr, flush=True)
sys.exit(3)
"""


def _warm(tmp_path: Path, *preload: str) -> subprocess.Popen[bytes]:
    pkg = tmp_path / "probe_pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    return subprocess.Popen(
        [sys.executable, "-m", "providers.warm", *preload],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _order(proc: subprocess.Popen[bytes], **order: object) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(order).encode() + b"\n")
    proc.stdin.close()


def test_runs_the_module_in_its_own_process_with_its_output_env_and_exit_code(tmp_path: Path) -> None:
    # torch starts a thread of its own at import: it must not take a SIGTERM meant for the runtime.
    proc = _warm(tmp_path, "torch")
    log = tmp_path / "runtime.log"
    _order(proc, module="probe_pkg", args=["spec.json", "x"], env={"PROBE_ENV": "secret-ish"}, log=str(log))
    assert proc.wait(timeout=60) == 3
    text = log.read_text()
    assert f"argv ['spec.json', 'x'] pid {proc.pid} env secret-ish" in text and "to stderr" in text
    threads = json.loads(text.split("threads ")[1].splitlines()[0].replace("True", "true").replace("False", "false"))
    assert threads and all(threads), "a preloaded module's thread would take SIGTERM's default action"
    assert proc.stdout is not None and b"argv" not in proc.stdout.read()  # nothing went to its old stdout


def test_a_cluster_gone_without_a_runtime_is_a_clean_exit(tmp_path: Path) -> None:
    proc = _warm(tmp_path)
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def test_a_sigterm_before_the_order_means_stop(tmp_path: Path) -> None:
    proc = _warm(tmp_path, "json")
    time.sleep(1.0)  # past the interpreter's start-up: the mask is on
    os.kill(proc.pid, signal.SIGTERM)
    log = tmp_path / "never.log"
    _order(proc, module="probe_pkg", args=[], env={}, log=str(log))
    assert proc.wait(timeout=30) in (128 + signal.SIGTERM, -signal.SIGTERM)
    assert not log.exists()


def test_a_malformed_order_is_one_line_and_runs_nothing(tmp_path: Path) -> None:
    proc = _warm(tmp_path)
    assert proc.stdin is not None
    proc.stdin.write(b'{"module": "probe_pkg"}\n')
    proc.stdin.close()
    assert proc.wait(timeout=30) == EXIT_BAD_ORDER
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    assert out.count("\n") == 1 and out.startswith("providers.warm: order must be an object")
