"""``python -m orchestrator`` as a user runs it: a bad key is one line and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_cli(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=REPO,
        env={**os.environ, "ORCHESTRATOR_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_typo_in_a_key_exits_2_with_one_line_naming_the_key_and_no_traceback(tmp_path: Path) -> None:
    proc = run_cli(["trainer.wrkers=3"], tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].strip()
    assert "trainer.wrkers" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout == ""


def test_help_exits_0_and_prints_usage(tmp_path: Path) -> None:
    proc = run_cli(["--help"], tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: python -m orchestrator")
    assert "Traceback" not in proc.stderr
