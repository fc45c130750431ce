"""Shared by the benchmark scripts: run the orchestrator, start a bare cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def orchestrate(home: str, run_id: str, *overrides: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    env = dict(os.environ, ORCHESTRATOR_HOME=home)
    argv = [
        sys.executable,
        "-m",
        "orchestrator",
        "job=digits",
        f"run_id={run_id}",
        "progress=false",
        *overrides,
    ]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    run_dir = Path(home) / "runs" / run_id
    if proc.returncode != 0:
        raise SystemExit(f"orchestrator run {run_id} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads((run_dir / "result.json").read_text())
    journal = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines() if x.strip()]
    return result, journal


def temp_home() -> str:
    return tempfile.mkdtemp(prefix="orch-bench-")


def ray_client_env() -> None:
    """What a driver on this machine needs to reach a local-provider cluster (see providers/local.py)."""
    from providers.local import BASE_ENV

    os.environ.update(BASE_ENV)
