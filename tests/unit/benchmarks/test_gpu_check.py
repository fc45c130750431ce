"""benchmarks/gpu_check.py's verdict, driven with records (the GPU run itself is marked gpu)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import gpu_check
from benchmarks.gpu_check import checks, overrides
from tests.unit.benchmarks.test_common import written

GPU = {"utilization_peak_percent": 87, "utilization_mean_percent": 61.0, "memory_peak_bytes": 2_000_000_000}


def result(**over: Any) -> dict[str, Any]:
    base = {
        "status": "SUCCEEDED",
        "weights_sha256": "ab" * 32,
        "metrics": {"eval_loss": 2.9},
        "telemetry": {"gpu": [GPU], "gpu_absent_reason": None},
    }
    return {**base, **over}


JOURNAL = [{"type": "runtime.train_started", "device": "cuda:0"}]


def test_a_gpu_run_that_trained_on_cuda_and_resumed_exactly_passes() -> None:
    assert checks(result(), JOURNAL, result()) == []


def test_each_thing_only_a_gpu_shows_is_checked() -> None:
    cpu = checks(result(), [{"type": "runtime.train_started", "device": "cpu"}], None)
    assert cpu and "expected cuda" in cpu[0]
    absent = checks(result(telemetry={"gpu": None, "gpu_absent_reason": "NVML sees no GPU"}), JOURNAL, None)
    assert absent == ["telemetry saw no GPU: NVML sees no GPU"]
    idle = checks(result(telemetry={"gpu": [{**GPU, "utilization_peak_percent": 0}]}), JOURNAL, None)
    assert idle and "idle" in idle[0]
    assert "did not fall" in checks(result(metrics={"eval_loss": 5.6}), JOURNAL, None)[0]
    assert "differ" in checks(result(), JOURNAL, result(weights_sha256="cd" * 32))[0]
    assert "ended FAILED" in checks(result(), JOURNAL, result(status="FAILED"))[0]


def test_the_runs_ask_for_the_gpu_in_every_candidate_region() -> None:
    args = overrides(100)
    assert "trainer.gpus_per_worker=1" in args and "job=gpt" in args
    assert {"cloud.regions.local-a.num_gpus=1", "cloud.regions.local-b.num_gpus=1"} <= set(args)


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
