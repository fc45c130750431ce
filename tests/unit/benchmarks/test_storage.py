"""benchmarks/storage.py's figures: the keys the issue asks for, and a partial run's."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import storage
from tests.unit.benchmarks.test_common import written

pytestmark = pytest.mark.unit


def test_storage_figures_give_the_issue_keys(tmp_path: Path) -> None:
    rates = {"none": 100.0, "async": 95.0, "sync": 80.0, "async-50": 90.0, "sync-50": 50.0}
    replication = {"local-b": (0.3, 0.2), "local-c": (0.5, 0.2)}
    upload = {"ours": 45.0, "raw": 50.0, "shared": 72.0}
    out = written(tmp_path, storage.figures(upload, rates, replication, (1.2, 1.0, 230_000_000)))
    assert out["upload_ratio"] == 0.9
    assert out["upload_shared_mb_s"] == 72.0 and out["upload_shared_speedup"] == 1.6
    assert out["steps_ratio_async"] == 0.95 and out["steps_ratio_sync"] == 0.8
    assert out["steps_ratio_async_high"] == 0.9 and out["steps_ratio_sync_high"] == 0.5
    assert out["steps_per_s_async_high"] == 90.0
    assert out["replication_ratio_local_b"] == 1.5 and out["replication_ratio"] == 2.5
    assert out["restore_ratio"] == 1.2 and out["restore_mb"] == 230.0


def test_storage_figures_of_a_partial_run_leave_out_what_was_not_measured(tmp_path: Path) -> None:
    out = written(tmp_path, storage.figures(None, {"none": 2.0, "async": 1.9}, {}, None))
    assert out == {"steps_per_s_none": 2.0, "steps_per_s_async": 1.9, "steps_ratio_async": 0.95}
