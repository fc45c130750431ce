"""Shared by the benchmark scripts: run the orchestrator, start a bare cluster."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support import orchestrate as run_orchestrator  # noqa: E402


def orchestrate(home: str, run_id: str, *overrides: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One run through the tests' runner (tests/support.py); (result, journal), or exit on failure."""
    run = run_orchestrator(Path(home), run_id, *overrides, timeout=900)
    if run.returncode != 0 or run.result is None:
        raise SystemExit(f"orchestrator run {run_id} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    return run.result, run.journal()


def temp_home() -> str:
    return tempfile.mkdtemp(prefix="orch-bench-")


def ray_client_env() -> None:
    """What a driver on this machine needs to reach a local-provider cluster (see providers/local.py)."""
    from providers.local import BASE_ENV

    os.environ.update(BASE_ENV)
