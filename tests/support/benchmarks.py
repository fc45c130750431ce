"""Run a benchmark script as a user does, on a machine it has never run on."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.paths import REPO
from tests.support.runs import env_for


@dataclass
class BenchmarkRun:
    returncode: int
    stdout: str
    stderr: str
    figures: dict[str, Any] | None  # what --json wrote, if anything

    def said(self) -> str:
        return f"exit {self.returncode}\n{self.stdout[-3000:]}\n{self.stderr[-3000:]}"


def run_benchmark(script: str, tmp: Path, *args: str, timeout: float = 600, fresh_home: bool = True) -> BenchmarkRun:
    """``python benchmarks/<script>.py ARGS --json <tmp>/figures.json`` from the repository's
    root, with a HOME of its own (no ``~/.ray``, no ``~/.orchestrator``: a fresh machine)
    unless ``fresh_home`` is false (a benchmark that needs the user's SSH keys and SkyPilot
    configuration, as the Slurm one does)."""
    out = tmp / "figures.json"
    extra: dict[str, str] = {}
    if fresh_home:
        home = tmp / "user-home"
        home.mkdir(parents=True, exist_ok=True)
        extra["HOME"] = str(home)
    env = env_for(tmp / "orchestrator-home", extra)
    proc = subprocess.run(
        [sys.executable, f"benchmarks/{script}.py", *args, "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    figures = json.loads(out.read_text()) if out.exists() else None
    return BenchmarkRun(proc.returncode, proc.stdout, proc.stderr, figures)
