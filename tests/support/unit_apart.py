"""The unit tier of a full ``python -m pytest``, run apart: a second pytest, at a lower
CPU priority, beside the tiers that start Ray.

A full run spends most of its time in the Ray tiers, whose runs leave about a quarter
of this machine's two cores idle (waiting out a lease, a launch, a restart); the unit
tier (about 5000 pure tests, a minute and a half of one core) fits in those gaps
instead of adding its time after them. Its priority is lowered (``NICENESS``) so it
takes what the Ray runs leave rather than slowing them. Its result is the run's:
its summary is printed at the end, with its failures, and a failure fails the run.

Only the default full run does this (no paths, ``-k`` or ``-m`` of its own, no
``--lf``): any narrower run, ``pytest -m unit`` included, runs its tests in itself.
``ORCHESTRATOR_UNIT_APART=0`` keeps the unit tier inline in a full run too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ENV = "ORCHESTRATOR_UNIT_APART"
# Low enough that the Ray runs keep their cores, high enough that a unit test waiting
# on a thread of its own (a join of a second or two) is not starved past its wait.
NICENESS = 10
# The full run's own marker expression (pyproject's addopts): a run that gives none of its own.
DEFAULT_MARKEXPR = "not soak and not bench"
# A unit tier still running this long after the rest ended is stopped and fails the run.
WAIT_S = 1800.0
# Of a failed unit tier's output, how much the run's summary shows.
SHOWN_LINES = 200


@dataclass
class Apart:
    proc: subprocess.Popen[bytes]
    log: Path
    basetemp: Path
    returncode: int | None = None


started: Apart | None = None


def wanted(config: pytest.Config) -> bool:
    """Whether this pytest is the default full run whose unit tier may run apart."""
    opt = config.option
    return (
        os.environ.get(ENV, "1") != "0"
        and not hasattr(config, "workerinput")
        and config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and (opt.markexpr or "").strip() == DEFAULT_MARKEXPR
        and not (opt.keyword or "").strip()
        and not getattr(opt, "lf", False)
        and not getattr(opt, "failedfirst", False)
        and not opt.collectonly
        and not getattr(opt, "showfixtures", False)
        and not getattr(opt, "show_fixtures_per_test", False)
        and getattr(opt, "numprocesses", None) is None
        and not config.getoption("usepdb", False)
    )


def start(root: Path) -> Apart:
    """The unit tier started in a pytest of its own, at NICENESS, its output to a file."""
    folder = Path(tempfile.mkdtemp(prefix="orch-unit-apart-"))
    log = folder / "unit.log"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "tests/unit",
        "-m",
        "unit",
        "-p",
        "no:xdist",  # one process: the cores belong to the Ray tiers
        "-p",
        "no:cacheprovider",
        f"--basetemp={folder / 'tmp'}",
        "--color=no",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, ENV: "0"},
            start_new_session=True,
        )
    try:
        os.setpriority(os.PRIO_PROCESS, proc.pid, NICENESS)
    except OSError:
        pass  # it runs at the same priority: slower beside the Ray tiers, still correct
    return Apart(proc, log, folder)


def wait(apart: Apart, timeout_s: float = WAIT_S) -> int:
    """The unit tier's exit code, once it ends (stopped, and 1, after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while apart.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    if apart.proc.poll() is None:
        stop(apart)
        with open(apart.log, "a", encoding="utf-8") as fh:
            fh.write(f"\nunit tier: still running {timeout_s:.0f} s after the other tiers ended; stopped\n")
        apart.returncode = 1
    else:
        apart.returncode = apart.proc.returncode
    return apart.returncode


def stop(apart: Apart) -> None:
    if apart.proc.poll() is None:
        try:
            os.killpg(apart.proc.pid, 9)
        except ProcessLookupError:
            pass
        apart.proc.wait()


def summary(apart: Apart) -> list[str]:
    """What the run's summary shows of the unit tier: its last line and, when it failed,
    its failures (the end of its output)."""
    lines = apart.log.read_text(encoding="utf-8", errors="replace").splitlines()
    last = next((line for line in reversed(lines) if line.strip()), "(no output)")
    head = f"unit tier (run apart, exit {apart.returncode}): {last.strip('= ')}"
    if apart.returncode in (0, None):
        return [head]
    return [head, f"its output: {apart.log}", *lines[-SHOWN_LINES:]]


def cleanup(apart: Apart) -> None:
    """Its temporary folder, once it passed (a failed one's log stays for reading)."""
    if apart.returncode == 0:
        shutil.rmtree(apart.basetemp, ignore_errors=True)
