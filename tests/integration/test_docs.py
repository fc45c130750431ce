"""The documentation site builds with ``mkdocs build --strict``: a broken link, a missing
page or an entry point mkdocstrings cannot render fails it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.runs import skip_unless_strict

pytestmark = pytest.mark.integration


def test_the_docs_build_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        skip_unless_strict("mkdocs is not installed: pip install -c constraints.txt -e '.[docs]'")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    site = tmp_path / "site"
    assert (site / "reference" / "config" / "index.html").exists()
    assert "CheckpointStore" in (site / "reference" / "api" / "index.html").read_text()
    assert (site / "images" / "incident-report.png").exists()
