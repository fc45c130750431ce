"""``action=list``: every run under home as one row, a view of its folded journal.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.commands.runs_list import (
    CONTROLLER_DIED,
    EMPTY,
    UNREADABLE,
)
from tests.support.paths import REPO

pytestmark = pytest.mark.integration


def test_the_real_command_lists_every_kind_of_run_without_ray(home: Path, tmp_path: Path) -> None:
    # A ray that cannot be imported: the listing must neither start nor need a cluster.
    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('action=list imported ray')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "action=list", f"home={home}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), str(REPO)])},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("RUN ID")
    status = {line.split()[0]: line.split()[2] for line in lines[1:10]}
    assert status == {
        "bad-result": UNREADABLE,
        "bad-line": UNREADABLE,
        "running": "RUNNING",
        "died": CONTROLLER_DIED,
        "failed": "FAILED",
        "succeeded": "SUCCEEDED",
        "a-file": UNREADABLE,
        "empty": EMPTY,
        "journal-folder": UNREADABLE,
    }
    assert "died: its controller died; continue it with action=resume run_id=died" in lines
