"""Hydra's conventions on this command line: its flags (--cfg, --info, -m, --help), its
settings refused by name, a sweep's expansion and summary, adding a region with '+'.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.commands import sweep
from orchestrator.config.schema import Config
from tests.unit.orchestrator.config.test_cli import home  # noqa: F401 (autouse: these tests run under it too)

pytestmark = pytest.mark.integration


def test_the_child_runner_passes_a_signal_to_the_runs_process_group_once(tmp_path: Path) -> None:
    """The real runner on a stand-in process: it gets the run's overrides, and SIGINT to
    the sweep reaches it (and what it started) through its own process group."""
    marker = tmp_path / "argv.json"
    child = (
        "import json, signal, subprocess, sys, time\n"
        "GRAND = 'import signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); time.sleep(30)'\n"
        "grand = subprocess.Popen([sys.executable, '-c', GRAND])\n"
        f"json.dump([sys.argv[1:], grand.pid], open({str(marker)!r}, 'w'))\n"
        "signal.signal(signal.SIGINT, lambda *a: sys.exit(130))\n"
        "time.sleep(30)\n"
    )
    runner = sweep.ChildRunner([sys.executable, "-c", child])
    planned = [
        sweep.Planned(("job.lr=0.1", "run_id=r-0"), compose_stub(tmp_path), "r-0", ("0.1",)),
        sweep.Planned(("job.lr=0.2", "run_id=r-1"), compose_stub(tmp_path), "r-1", ("0.2",)),
    ]

    def ctrl_c() -> None:
        while not marker.exists() or not marker.read_text():
            threading.Event().wait(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    assert sweep.run_sweep(planned, ("job.lr",), runner) == sweep.EXIT_INTERRUPTED
    argv, grand = json.loads(marker.read_text())
    assert argv == ["job.lr=0.1", "run_id=r-0"]
    # The grandchild got the same SIGINT from the group, and ended.
    for _ in range(250):
        state = subprocess.run(["ps", "-p", str(grand), "-o", "stat="], capture_output=True, text=True).stdout
        if state.strip() in ("", "Z"):
            break
        threading.Event().wait(0.02)
    assert state.strip() in ("", "Z")


def compose_stub(tmp_path: Path) -> Config:
    cfg = Config()
    cfg.home = str(tmp_path / "home")
    return cfg
