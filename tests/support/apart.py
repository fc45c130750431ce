"""A full ``python -m pytest`` runs two groups of tests apart, each in a pytest of its own
beside the main one, instead of after it: the unit tier, and the tests on CI's Slurm
cluster (after a few Ray tests that mostly wait out a lease or a freeze).

The main run spends most of its time in the Ray tiers, whose runs leave a tenth to a
quarter of this machine's two cores idle (a lease waited out, a launch, a restart). The
unit tier (about 5000 pure tests, two minutes of one core) fits in those gaps, at niceness
10: below the controllers, the runtime drivers and Ray's daemons (0), though above Ray's
own worker processes, which Ray starts at 15 (``RAY_worker_niceness``, its default), so
that it is not starved by a driver's or a cluster's start. The Slurm tests
(SkyPilot's launches and teardowns on the one-node cluster, five minutes) mostly wait:
half of two cores is idle while they run. So do the hedge, fencing, takeover and stop
tests (a lease or a freeze waited out), which go first, while CI still installs Slurm.

Each group's result is the run's: its summary line is printed at the end, with its
failures, and a failure fails the run. The groups share the machine, not their
processes: each pytest names itself in ORCH_TEST_SESSION, which every process it starts
inherits, and counts only its own Ray processes (``tests.support.runs.ray_pids``); each
hands out ports from a range of its own (ORCHESTRATOR_LOCAL_PORTS), and the local
provider's clusters are each their own even under one name (their launch's marker).

Only the default full run does this (no paths, ``-k`` or ``-m`` of its own, no ``--lf``):
any narrower run, ``pytest -m unit`` included, runs its tests in itself.
``ORCHESTRATOR_APART=0`` keeps every test in the main run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ENV = "ORCHESTRATOR_APART"
# The full run's own marker expression (pyproject's addopts): a run that gives none of its own.
DEFAULT_MARKEXPR = "not soak and not bench"
MAIN_SESSION = "main"
# A group still running this long after the main run ended is stopped and fails the run.
WAIT_S = 1800.0
# Of a failed group's output, how much the run's summary shows.
SHOWN_LINES = 200


@dataclass(frozen=True)
class Group:
    """Tests run apart: ``paths`` (from the repository's root), in a pytest given ``args``,
    at ``niceness``."""

    name: str
    paths: tuple[str, ...]
    args: tuple[str, ...] = ()
    niceness: int = 0


GROUPS = (
    # One process at a lower priority than the controllers and drivers of the Ray tiers
    # (Ray's workers run at 15, below it). Low enough that those keep the cores, high
    # enough that a unit test waiting on a thread of its own (a join of a second or two)
    # is not starved past its wait.
    Group("unit", ("tests/unit",), ("-m", "unit", "-p", "no:xdist"), niceness=10),
    # Its own priority: a hedge and a lease are timed in the on-prem run. First, while CI
    # installs and starts the Slurm cluster, the Ray tests that mostly wait out a lease or
    # a freeze (a hedge, a fence, a takeover, a stop): little CPU, minutes of the main run's.
    Group(
        "slurm",
        (
            "tests/chaos/test_hedge.py",
            "tests/chaos/test_fencing.py",
            "tests/chaos/test_takeover.py",
            "tests/integration/test_stop.py",
            "tests/integration/providers/skypilot/test_conformance.py",
            "tests/chaos/test_onprem.py",
        ),
    ),
)


@dataclass
class Started:
    group: Group
    proc: subprocess.Popen[bytes]
    log: Path
    folder: Path
    returncode: int | None = None


@dataclass
class Apart:
    root: Path
    groups: list[Started] = field(default_factory=list)

    def owns(self, path: Path) -> bool:
        """Whether ``path`` (a folder or a test file, as pytest collects it: absolute) is a
        group's, not the main run's."""
        return path in {self.root / p for s in self.groups for p in s.group.paths}


started: Apart | None = None


def wanted(config: pytest.Config) -> bool:
    """Whether this pytest is the default full run whose groups may run apart."""
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


def port_ranges(count: int, low: int, high: int) -> list[str]:
    """``count`` ranges (ORCHESTRATOR_LOCAL_PORTS' LOW-HIGH) that split ``low``..``high``."""
    width = (high - low + 1) // count
    return [f"{low + i * width}-{low + (i + 1) * width - 1}" for i in range(count)]


def start(root: Path) -> Apart:
    """Every group started, each in a pytest of its own with its output to a file; this
    process named the main session, with its own ports (children inherit both)."""
    from providers.local.provider import PORT_LOW, PORTS_ENV, ephemeral_low
    from tests.support.runs import SESSION_ENV

    apart = Apart(root)
    ranges = port_ranges(len(GROUPS) + 1, PORT_LOW, ephemeral_low() - 1)
    os.environ[SESSION_ENV] = MAIN_SESSION
    os.environ.setdefault(PORTS_ENV, ranges[0])
    for group, ports in zip(GROUPS, ranges[1:], strict=True):
        folder = Path(tempfile.mkdtemp(prefix=f"orch-apart-{group.name}-"))
        log = folder / f"{group.name}.log"
        argv = [
            sys.executable,
            "-m",
            "pytest",
            *group.paths,
            *group.args,
            "-p",
            "no:cacheprovider",
            f"--basetemp={folder / 'tmp'}",
            "--color=no",
        ]
        env = {**os.environ, ENV: "0", SESSION_ENV: group.name, PORTS_ENV: ports}
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, cwd=root, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        if group.niceness:
            try:
                os.setpriority(os.PRIO_PROCESS, proc.pid, group.niceness)
            except OSError:
                pass  # it runs at the same priority: slower beside the Ray tiers, still correct
        apart.groups.append(Started(group, proc, log, folder))
    return apart


def wait(started: Started, timeout_s: float = WAIT_S) -> int:
    """The group's exit code, once it ends (stopped, and 1, after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while started.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    if started.proc.poll() is None:
        stop(started)
        with open(started.log, "a", encoding="utf-8") as fh:
            fh.write(f"\n{started.group.name}: still running {timeout_s:.0f} s after the main run ended; stopped\n")
        started.returncode = 1
    else:
        started.returncode = started.proc.returncode
    return started.returncode


def stop(started: Started) -> None:
    """The group's pytest interrupted (its fixtures tear down what they started), then killed."""
    if started.proc.poll() is None:
        started.proc.send_signal(signal.SIGINT)
        try:
            started.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            started.proc.kill()
            started.proc.wait()


def summary(started: Started) -> list[str]:
    """What the run's summary shows of a group: its last line and, when it failed, its
    failures (the end of its output)."""
    lines = started.log.read_text(encoding="utf-8", errors="replace").splitlines()
    last = next((line for line in reversed(lines) if line.strip()), "(no output)")
    head = f"apart, {started.group.name} (exit {started.returncode}): {last.strip('= ')}"
    if started.returncode in (0, None):
        return [head]
    return [head, f"its output: {started.log}", *lines[-SHOWN_LINES:]]


def cleanup(started: Started) -> None:
    """Its temporary folder, once it passed (a failed one's log stays for reading)."""
    if started.returncode == 0:
        shutil.rmtree(started.folder, ignore_errors=True)
