"""``action=run`` as a user starts it, up to the launch: what it says before anything
runs. (The runs themselves are the chaos and digits tests'.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orchestrator.runstate.rundir import lock_controller, run_path
from tests.support.paths import REPO
from tests.support.runs import env_for

KEY = {"ORCHESTRATOR_CONTROL_KEY": "7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d"}


def test_a_control_store_with_stores_on_this_machines_disk_is_said_once_at_launch(tmp_path: Path) -> None:
    """The default local stores live under this machine's home: a takeover from another
    machine would find no checkpoint. The run says so once, in one line naming the setting,
    as it starts (here it then stops at once: another controller holds its folder's lock)."""
    home = tmp_path / "home"
    held = lock_controller(run_path(str(home), "warned"))
    assert held is not None
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestrator",
                "job=digits",
                "run_id=warned",
                "progress=false",
                f"cloud.control_store=file://{tmp_path}/control",
            ],
            cwd=REPO,
            env=env_for(home, KEY),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        held.close()
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: cloud.control_store")]
    assert len(warnings) == 1, proc.stderr[-2000:]
    assert "cloud.regions.local-a.store" in warnings[0] and "a taker would find no checkpoint" in warnings[0]
    assert proc.returncode == 2 and "is running under another controller" in proc.stderr, proc.stderr[-2000:]
