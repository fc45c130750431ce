"""The loss series a run's report plots: ``loss.jsonl`` beside the journal, one point
per progress report (the journal keeps decisions, not every loss)."""

from __future__ import annotations

import json
import os
from typing import Any

from orchestrator.runstate import rundir
from orchestrator.runstate.journal import json_lines, shape_problem
from orchestrator.runstate.runfiles import open_fd

_POINT: dict[str, tuple[type, ...]] = {"generation": (int,), "step": (int,), "region": (str,), "loss": (int, float)}


def append_loss(run_dir: str, **point: Any) -> None:
    """One (time, generation, region, step, loss) point; the watch adds one per progress report."""
    append_losses(run_dir, [point])


def append_losses(run_dir: str, points: list[dict[str, Any]]) -> None:
    """Points as ``append_loss`` writes them, in one open and write; DamagedFile when
    loss.jsonl is no regular file (never written through a link)."""
    if points:
        fd = open_fd(os.path.join(run_dir, rundir.LOSS_NAME), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(point) + "\n" for point in points))


def read_loss(run_dir: str) -> list[dict[str, Any]]:
    # Keyed by (generation, step): an adopted attempt's samples may be read twice.
    # The plot's input only: a point that is not one we wrote is left out, not an error.
    points = {
        (p["generation"], p["step"]): p
        for _, p in json_lines(os.path.join(run_dir, rundir.LOSS_NAME))
        if shape_problem(p, _POINT, {}) is None
    }
    return list(points.values())


def last_loss_step(run_dir: str) -> int | None:
    """The step of the last point appended: where the series written so far ends."""
    last = None
    for _, p in json_lines(os.path.join(run_dir, rundir.LOSS_NAME)):
        # A diverged loss (NaN) is a point too: only its step counts here.
        if shape_problem(p, {"step": (int,)}, {}) is None:
            last = int(p["step"])
    return last
