"""benchmarks/storage.py with its smallest settings: it starts its own S3 and GCS servers;
1 MB to upload and the two training arms the ratios need."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.bench]


def test_storage_runs(tmp_path: Path) -> None:
    args = ("--mb", "1", "--steps", "100", "--interval", "50", "--interval-high", "50", "--modes", "none,async")
    run = run_benchmark("storage", tmp_path, *args)
    assert run.returncode == 0, run.said()
    assert run.figures is not None
