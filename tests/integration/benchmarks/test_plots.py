"""benchmarks/plots.py on a copy of the committed figures: every plot is drawn."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.integration


def test_plots_runs(tmp_path: Path) -> None:
    figures = tmp_path / "figures"
    figures.mkdir()
    for src in (REPO / "docs" / "benchmarks").glob("*.json"):
        shutil.copy(src, figures)
    proc = subprocess.run(
        [sys.executable, "benchmarks/plots.py", "--dir", str(figures)], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in figures.glob("*.png")) == sorted(
        p.name for p in (REPO / "docs" / "benchmarks").glob("*.png")
    )
