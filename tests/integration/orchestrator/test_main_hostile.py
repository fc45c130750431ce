"""A handful of the hostile command lines (tests/unit/orchestrator/test_main_hostile.py)
as the real process: ``python -m orchestrator`` exits 2 with one line, within seconds,
writing nothing under its home or the user's home."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.integration

R = "cloud.regions.local-a"

PROCESS_CASES = [
    ["job.steps=" + "9" * 5000],
    ["job.params.x=" + "[" * 3000 + "]" * 3000],
    ["-m", "job.seed=range(0,100000000)"],
    [f"+{R}.storage_options.s3_additional_kwargs.SSECustomerKey=x"],
    ["cloud=local", "cloud=aws"],
    ["~action"],
]


def _sandbox_env(tmp_path: Path) -> dict[str, str]:
    """A home and a user's home of their own under ``tmp_path``, the repository importable."""
    for d in ("home", "user"):
        (tmp_path / d).mkdir()
    return {
        **os.environ,
        "HOME": str(tmp_path / "user"),
        "ORCHESTRATOR_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(REPO),
    }


def test_the_real_process_refuses_hostile_command_lines_in_one_line(tmp_path: Path) -> None:
    env = _sandbox_env(tmp_path)
    for args in PROCESS_CASES:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        took = time.monotonic() - started
        lines = done.stderr.splitlines()
        assert done.returncode == 2, (args[:2], done.stderr[-500:])
        assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-500:]
        assert "Traceback" not in done.stderr and done.stdout == ""
        assert took < 30, f"{args[:2]} took {took:.0f}s"
        assert sorted(tmp_path.rglob("*")) == [tmp_path / "home", tmp_path / "user"], args[:2]


SECRET = "SECRETKEY" * 8
KEY_COMMANDS = [
    ["sh", "-c", f"echo {SECRET} >&2; exit 3"],  # its stderr held the key
    ["sh", "-c", f"echo {SECRET}; exit 1"],
    ["sh", "-c", f"echo {SECRET} >&2; echo"],  # a blank key
    ["yes", SECRET],  # a key without end
]


@pytest.mark.parametrize("action", [[], ["action=resume", "run_id=r1"]], ids=["run", "resume"])
def test_a_key_command_that_gives_no_key_is_one_line_showing_none_of_its_output(
    tmp_path: Path, action: list[str]
) -> None:
    """Refused before a word is printed or a folder made: no run folder, no control store."""
    env = _sandbox_env(tmp_path)
    for command in KEY_COMMANDS:
        args = [*action, f"cloud.control_store=file://{tmp_path}/ctl", f'cloud.control_key="cmd:{shlex.join(command)}"']
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = done.stderr.splitlines()
        assert done.returncode == 2, (command, done.stderr[-500:])
        assert len(lines) == 1 and lines[0].startswith(f"error: cloud.control_key: cmd:{command[0]} ..."), lines
        assert "SECRETKEY" not in done.stdout + done.stderr and done.stdout == ""
        assert sorted(tmp_path.rglob("*")) == [tmp_path / "home", tmp_path / "user"], command
