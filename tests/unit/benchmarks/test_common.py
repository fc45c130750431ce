"""The benchmarks' ``--json PATH``: each script's parser takes it, and the pure functions
that turn a run's records into figures give the flat keys the README's tables read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import data_loading, gpu_check, recovery, storage
from benchmarks.common import write_json

SCRIPTS = [recovery, storage, data_loading, gpu_check]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__.split(".")[-1])
def test_every_script_takes_json_and_keeps_its_defaults(script: Any) -> None:
    assert script.parse_args([]).json is None
    assert script.parse_args(["--json", "out.json"]).json == "out.json"
    with pytest.raises(SystemExit) as info:
        script.parse_args(["--help"])
    assert info.value.code == 0


def test_recovery_and_storage_take_a_job_digits_by_default() -> None:
    for script in (recovery, storage):
        assert script.parse_args([]).job == "digits"
        assert script.parse_args(["--job", "gpt_large"]).job == "gpt_large"
    args = recovery.parse_args([])
    assert (args.steps, args.kill_at, args.interval_steps) == (10000, 6000, None)
    args = storage.parse_args([])
    assert (args.mb, args.steps, args.interval, args.interval_high) == (48, 3000, 500, 50)
    assert args.modes == list(storage.MODES)
    assert storage.parse_args(["--modes", "none,async"]).modes == ["none", "async"]
    with pytest.raises(SystemExit) as info:
        storage.parse_args(["--modes", "none,fast"])
    assert info.value.code == 2


def written(tmp_path: Path, figures: dict[str, Any]) -> dict[str, Any]:
    """Through write_json, which refuses anything but flat JSON values under plain keys."""
    path = tmp_path / "figures.json"
    write_json(str(path), figures)
    out = json.loads(path.read_text())
    assert out.pop("date")
    return out


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


def test_data_loading_figures_give_each_loader_and_the_ratios(tmp_path: Path) -> None:
    def row(loader: str, scale: float) -> dict[str, Any]:
        return {
            "loader": loader,
            "wall_s": 10.0 * scale,
            "steps_per_s": 30.0 / scale,
            "samples_per_s": 3000.0 / scale,
            "worker_peak_rss": int(400e6 * scale),
            "ray_peak_rss": int(900e6 * scale),
            "tcp_bytes": int(5e6 * scale),
            "io_bytes": 0,
            "cpu_percent": 95.0,
            "accuracy": 0.9,
        }

    rows = [row("sharded", 1.0), row("ray_data", 2.0)]
    assert "ray_data / sharded" in data_loading.table(rows)
    out = written(tmp_path, data_loading.figures(rows))
    assert out["sharded_steps_per_s"] == 30.0 and out["ray_data_steps_per_s"] == 15.0
    assert out["sharded_worker_peak_rss_mb"] == 400.0 and out["ray_data_tcp_mb"] == 10.0
    assert out["ray_data_ratio_wall_s"] == 2.0 and out["ray_data_ratio_steps_per_s"] == 0.5
    assert out["ray_data_ratio_io_mb"] is None  # sharded's was 0


def test_gpu_check_figures_are_flattened_with_the_verdict(tmp_path: Path) -> None:
    figures = {
        "gpu": "NVIDIA H200",
        "steps_per_s": 12.5,
        "eval_loss": 2.9,
        "gpu_utilization_mean_percent": [61.0],
        "gpu_memory_peak_mb": [2000],
        "exact_after_kill_region": True,
        "rto_s": [9.5],
    }
    out = written(tmp_path, gpu_check.flat_figures(figures, []))
    assert out["gpu_utilization_mean_percent"] == 61.0 and out["gpu_memory_peak_mb"] == 2000
    assert out["rto_s"] == 9.5 and out["incidents"] == 1 and out["checks_held"] is True
    none = gpu_check.flat_figures({**figures, "rto_s": [], "gpu_memory_peak_mb": []}, ["telemetry saw no GPU"])
    assert none["rto_s"] is None and none["gpu_memory_peak_mb"] is None
    assert none["checks_failed"] == 1 and none["checks_held"] is False


def test_gpu_check_without_a_gpu_writes_that_it_did_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    path = tmp_path / "gpu.json"
    assert gpu_check.main(["--json", str(path)]) == 2
    out = json.loads(path.read_text())
    assert out["gpu"] is None and out["checks_held"] is None
