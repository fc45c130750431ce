"""Shared by the benchmark scripts: run the orchestrator, start a bare cluster."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from tests.support.runs import orchestrate as run_orchestrator

REPO = Path(__file__).resolve().parent.parent


def orchestrate(home: str, run_id: str, *overrides: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One run through the tests' runner (tests/support/runs.py); (result, journal), or exit on failure."""
    run = run_orchestrator(Path(home), run_id, *overrides, timeout=900)
    if run.returncode != 0 or run.result is None:
        raise SystemExit(f"orchestrator run {run_id} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    return run.result, run.journal()


def temp_home() -> str:
    return tempfile.mkdtemp(prefix="orch-bench-")


def ray_client_env() -> None:
    """What a driver on this machine needs to reach a local-provider cluster (see providers/local/provider.py)."""
    import sys

    from providers.local.provider import BASE_ENV

    applied = all(os.environ.get(key) == value for key, value in BASE_ENV.items())
    os.environ.update(BASE_ENV)
    # Ray reads its address and auth settings once, when it is first imported: a driver
    # that imported Ray before would resolve the cluster's 127.0.0.1 to this machine's
    # routed address (nothing listens there) and send no token.
    if "ray" in sys.modules and not applied:
        raise RuntimeError("ray_client_env() must run before the driver first imports ray")


def write_json(path: str | None, figures: dict[str, Any]) -> None:
    """``--json PATH``: the benchmark's figures and ratios as one flat JSON object (numbers,
    booleans, strings or null under plain keys), dated, for the README's tables and CI to read."""
    import datetime
    import json
    import math

    if not path:
        return
    for key, value in figures.items():
        if not isinstance(key, str) or not key.replace("_", "").isalnum():
            raise ValueError(f"benchmark figure key {key!r}: expected a plain name (letters, digits, _)")
        if not (
            value is None or isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value))
        ):
            raise ValueError(f"benchmark figure {key}: {type(value).__name__} is not a flat JSON value")
    out = {"date": datetime.date.today().isoformat(), **figures}
    Path(path).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
