"""benchmarks/recovery.py's figures: the phases and the keys the issue asks for, driven with made-up runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import recovery
from tests.unit.benchmarks.test_common import written

pytestmark = pytest.mark.unit


def journal(failed: float, standby: bool) -> list[dict[str, Any]]:
    """What a failover's journal holds, from the failure at ``failed`` on."""
    ready = (
        {"type": "standby_activated", "ts": failed + 1.5}
        if standby
        else {"type": "provisioned", "ts": failed + 4.0, "purpose": "attempt"}
    )
    return [
        {"type": "runtime.workers_ready", "ts": 1.0, "time": 1.0, "generation": 0},
        {"type": "attempt_started", "ts": failed + 1.2, "generation": 1, "standby": standby},
        ready,
        {"type": "runtime.workers_ready", "ts": failed + 6.0, "time": failed + 6.0, "generation": 1},
        {"type": "runtime.train_started", "ts": failed + 7.0, "time": failed + 7.0, "generation": 1},
    ]


def test_recovery_phases_and_figures_give_the_issue_keys(tmp_path: Path) -> None:
    rows = {}
    for mode, standby in (("cold", False), ("warm standby", True)):
        incident = {"failed_at": 100.0, "detected_at": 101.0, "first_step_at": 107.5, "rto_s": 7.5}
        rows[mode] = recovery.phases(journal(100.0, standby), incident)
    assert list(rows["cold"]) == list(recovery.PHASE_KEYS)
    assert rows["cold"]["provisioning"] == pytest.approx(3.0)
    assert rows["warm standby"]["provisioning"] == pytest.approx(0.5)
    floor = {"ray start": 2.0, "checkpoint load": 0.5, "total": 2.5, "checkpoint bytes": 230_200_000}
    out = written(tmp_path, recovery.figures(rows, floor, heartbeat_s=1.0))
    assert out["rto_cold_s"] == 7.5 and out["rto_floor_s"] == 2.5 and out["rto_ratio"] == 3.0
    assert out["rto_standby_s"] == 7.5 and out["checkpoint_mb"] == 230.2
    assert out["cold_detection_heartbeats"] == 1.0
    for prefix in ("cold", "standby"):
        for key in ("detection", "provisioning", "runtime_startup", "restore", "first_step"):
            assert f"{prefix}_{key}_s" in out
    assert out["cold_restore_s"] == pytest.approx(1.0)
