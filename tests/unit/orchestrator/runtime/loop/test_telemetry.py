"""Per-worker telemetry: real measurements of this process, NVML parsed through a stand-in library."""

from __future__ import annotations

import io
import os
import struct
import time
from typing import Any

import pytest

from orchestrator.control.progress import ProgressLine, telemetry_text
from orchestrator.runtime.loop import telemetry
from orchestrator.runtime.loop.telemetry import (
    BYTES_ACKED_AT,
    BYTES_RECEIVED_AT,
    Nvml,
    Sampler,
    summary,
    tcp_bytes,
    visible_gpus,
)


def test_tcp_info_offsets() -> None:
    raw = bytearray(232)
    struct.pack_into("<Q", raw, BYTES_ACKED_AT, 123_456_789_012)
    struct.pack_into("<Q", raw, BYTES_RECEIVED_AT, 42)
    assert tcp_bytes(bytes(raw)) == (123_456_789_012, 42)
    assert tcp_bytes(bytes(100)) is None  # a kernel whose struct stops before the counters


def test_sampler_measures_cpu_rss_samples_and_says_why_there_is_no_gpu() -> None:
    sampler = Sampler(rank=1, interval_s=0.05, nvml=(None, "no NVML library (test)")).start()
    total = 0
    burnt0 = time.process_time()
    for _ in range(50):
        total += sum(i * i for i in range(20_000))  # burn some CPU
        sampler.count(64)
    burnt = time.process_time() - burnt0
    t = sampler.snapshot()
    sampler.stop()
    assert t.rank == 1 and t.samples == 50 * 64
    # Held to the CPU seconds the loop burnt, not to a share of the wall: on a
    # loaded machine the same loop takes a smaller share of a longer wall.
    assert t.cpu_percent > 0
    assert t.cpu_percent * t.elapsed_s / 100 >= 0.5 * burnt
    assert t.peak_rss_bytes > 10 * 1024 * 1024
    assert t.samples_per_s > 0
    assert t.gpu is None and t.gpu_absent_reason == "no NVML library (test)"


def test_nvml_absent_is_reported_not_faked(monkeypatch: pytest.MonkeyPatch) -> None:
    # A library name no machine has: the absent path runs on GPU machines too.
    monkeypatch.setattr(telemetry, "NVML_LIB", "libnvidia-ml-absent.so.1")
    nvml, why = Nvml.load()
    assert nvml is None
    assert why is not None and "libnvidia-ml-absent.so.1" in why


class FakeNvml:
    """Stands in for libnvidia-ml: fills the structs NVML fills, from a table."""

    def __init__(self, devices: list[dict[str, Any]]) -> None:
        self.devices = devices

    def nvmlInit_v2(self) -> int:
        return 0

    def nvmlDeviceGetCount_v2(self, n: Any) -> int:
        n._obj.value = len(self.devices)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index: int, handle: Any) -> int:
        handle._obj.value = index + 1
        return 0

    def _dev(self, handle: Any) -> dict[str, Any]:
        return self.devices[int(handle.value) - 1]

    def nvmlDeviceGetUtilizationRates(self, handle: Any, util: Any) -> int:
        util._obj.gpu = self._dev(handle)["util"]
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle: Any, mem: Any) -> int:
        d = self._dev(handle)
        mem._obj.total, mem._obj.used, mem._obj.free = d["total"], d["used"], d["total"] - d["used"]
        return 0

    def nvmlDeviceGetName(self, handle: Any, buf: Any, size: int) -> int:
        buf.value = self._dev(handle)["name"].encode()
        return 0


def test_nvml_samples_are_parsed_and_aggregated_per_device() -> None:
    lib = FakeNvml(
        [
            {"name": "NVIDIA H200", "util": 40, "used": 10 << 30, "total": 141 << 30},
            {"name": "NVIDIA H200", "util": 0, "used": 1 << 30, "total": 141 << 30},
        ]
    )
    nvml = Nvml(lib)
    assert nvml.count() == 2
    assert nvml.sample(0) == {
        "index": 0,
        "name": "NVIDIA H200",
        "utilization_percent": 40,
        "memory_used_bytes": 10 << 30,
        "memory_total_bytes": 141 << 30,
    }
    sampler = Sampler(rank=0, interval_s=3600, nvml=(nvml, None))
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    try:
        sampler.start()
        lib.devices[0]["util"], lib.devices[0]["used"] = 80, 12 << 30
        t = sampler.snapshot()
    finally:
        sampler.stop()
        if old is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES")
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old
    assert t.gpu_absent_reason is None
    assert t.gpu == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "utilization_mean_percent": 60.0,
            "utilization_peak_percent": 80,
            "memory_peak_bytes": 12 << 30,
            "memory_total_bytes": 141 << 30,
            "samples": 2,
        }
    ]


def test_visible_gpus_follows_cuda_visible_devices() -> None:
    assert visible_gpus(4, {}) == [0, 1, 2, 3]
    assert visible_gpus(4, {"CUDA_VISIBLE_DEVICES": "2,3"}) == [2, 3]
    assert visible_gpus(2, {"CUDA_VISIBLE_DEVICES": ""}) == []


def _worker(rank: int, **kw: Any) -> dict[str, Any]:
    return {
        "rank": rank,
        "cpu_percent": 90.0,
        "peak_rss_bytes": 500_000_000 + rank,
        "net_bytes_sent": 2_000_000,
        "net_bytes_recv": 1_000_000,
        "samples_per_s": 1000.0,
        "gpu": None,
        "gpu_absent_reason": "no NVML library",
        **kw,
    }


def test_summary_and_progress_line_show_every_worker_and_the_gpu_verdict() -> None:
    tele = summary([_worker(1), _worker(0)])
    assert [w["rank"] for w in tele["workers"]] == [0, 1]
    assert tele["gpu"] is None and tele["gpu_absent_reason"] == "no NVML library"
    assert telemetry_text(tele) == "  2w cpu 90% rss 500.0MB net 4.0MB out/2.0MB in  2000 samples/s  gpu absent"
    gpu = [{"index": 0, "utilization_mean_percent": 55.0}]
    with_gpu = summary([_worker(0, gpu=gpu, gpu_absent_reason=None)])
    assert with_gpu["gpu"] == gpu and with_gpu["gpu_absent_reason"] is None
    assert telemetry_text(with_gpu).endswith("gpu 55%")

    out = io.StringIO()
    line = ProgressLine(out)
    line.update("local-a", 1, {"step": 10, "total": 500, "steps_per_s": 20.0, "telemetry": tele})
    assert "2w cpu 90%" in out.getvalue() and "gpu absent" in out.getvalue()
