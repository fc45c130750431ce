"""benchmarks/gpu_check.py's verdict, driven with records (the GPU run itself is marked gpu)."""

from __future__ import annotations

from typing import Any

from benchmarks.gpu_check import checks, overrides

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
