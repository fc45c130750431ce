"""Every printing action with its standard output piped to a reader that has already
left (``... | head`` after head exits): no traceback, no "Exception ignored" at exit, and
the exit status the action has anyway (0 here). The run itself goes on to its end, its
result and report written, when nobody reads its summary."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import FIXTURES, REPO
from tests.support.runs import env_for

pytestmark = pytest.mark.integration

RUN_ID = "piped"


def closed_reader(home: Path, *args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m orchestrator ARGS`` whose stdout is a pipe with no reader left, so its
    first write that reaches the pipe fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator", *args],
            cwd=REPO,
            env=env_for(home, extra),
            stdout=write_end,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=240,
        )
    finally:
        os.close(write_end)


def assert_quiet(proc: subprocess.CompletedProcess[str], args: tuple[str, ...]) -> None:
    for word in ("Traceback", "BrokenPipeError", "Exception ignored"):
        assert word not in proc.stderr, f"{args}: {proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{args}: {proc.returncode}\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home holding one run, run with nobody reading its output."""
    home = tmp_path_factory.mktemp("piped-home")
    args = ("job=digits", "job.steps=10", f"run_id={RUN_ID}", "chaos.faults=[{kind:kill_worker,at_step:5}]")
    proc = closed_reader(home, *args)
    assert_quiet(proc, args)
    run_dir = home / "runs" / RUN_ID
    assert (run_dir / "result.json").exists()
    assert (run_dir / "report.png").exists(), "the report is written after the summary nobody read"
    return home


@pytest.mark.parametrize(
    "args",
    [
        ("action=list",),
        ("action=list", "format=json"),
        ("action=status", f"run_id={RUN_ID}"),
        ("action=report", f"run_id={RUN_ID}"),
        ("action=logs", f"run_id={RUN_ID}"),
        ("action=logs", f"run_id={RUN_ID}", "attempt=1", "rank=0"),
        ("action=logs", f"run_id={RUN_ID}", "follow=true"),
        ("action=resume", f"run_id={RUN_ID}"),
        ("job=gpt", "--cfg", "job"),
        ("--info",),
        ("--help",),
    ],
)
def test_a_printing_action_ends_quietly(home: Path, args: tuple[str, ...]) -> None:
    assert_quiet(closed_reader(home, *args), args)


def test_a_plan_ends_quietly(home: Path, tmp_path: Path) -> None:
    pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    # SkyPilot's catalogs from the fixtures, so the plan needs no network.
    shutil.copytree(FIXTURES / "catalogs", tmp_path / ".sky" / "catalogs")
    args = ("job=digits", "cloud=multi", "action=plan")
    assert_quiet(closed_reader(home, *args, extra={"SKY_RUNTIME_DIR": str(tmp_path)}), args)


def test_a_sweep_runs_to_its_end_and_ends_quietly(home: Path) -> None:
    args = ("-m", "job=digits", "job.steps=5", "job.seed=3")
    proc = closed_reader(home, *args)
    assert_quiet(proc, args)
    assert "sweep: run 1 of 1" in proc.stderr
