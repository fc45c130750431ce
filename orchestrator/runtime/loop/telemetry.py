"""Per-worker telemetry, measured inside each worker process while it trains.

- CPU: the process's CPU time over wall time since training started (100 = one core busy).
- Peak RSS: the kernel's high-water mark for the process (``ru_maxrss``), which no
  sampling interval can miss.
- Network: bytes sent (acked by the peer) and received on the process's TCP sockets,
  read from the kernel's per-socket ``TCP_INFO`` (gloo's collectives, Ray's gRPC).
  Linux keeps no per-process network counter, so sockets are sampled every
  ``interval_s``: bytes of a connection opened and closed between two samples are missed.
- Samples/s: counted by the training loop.
- GPU: utilisation and memory through NVML (``libnvidia-ml.so.1``, loaded with ctypes
  when asked) when a GPU is visible; otherwise ``gpu`` is None and
  ``gpu_absent_reason`` says why. Never estimated.
"""

from __future__ import annotations

import ctypes
import os
import resource
import socket
import stat
import struct
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

TCP_INFO_LEN = 232
# struct tcp_info (linux/tcp.h): tcpi_bytes_acked and tcpi_bytes_received, u64 each.
BYTES_ACKED_AT, BYTES_RECEIVED_AT = 120, 128
NVML_LIB = "libnvidia-ml.so.1"


def tcp_bytes(info: bytes) -> tuple[int, int] | None:
    """(sent, received) from a raw TCP_INFO buffer; None when the kernel's struct is too old."""
    if len(info) < BYTES_RECEIVED_AT + 8:
        return None
    (sent,) = struct.unpack_from("<Q", info, BYTES_ACKED_AT)
    (recv,) = struct.unpack_from("<Q", info, BYTES_RECEIVED_AT)
    return int(sent), int(recv)


def socket_bytes(pid: int | None = None) -> dict[int, tuple[int, int]]:
    """{socket inode: (bytes sent, bytes received)} for this process's TCP sockets."""
    if pid not in (None, os.getpid()):
        raise ValueError("TCP_INFO is only readable for the calling process's own sockets")
    out: dict[int, tuple[int, int]] = {}
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return out
    for fd in fds:
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if not stat.S_ISSOCK(st.st_mode):
            continue
        try:
            dup = os.dup(fd)
        except OSError:
            continue
        try:
            # socket(fileno=) owns the duplicate and closes only that.
            with socket.socket(fileno=dup) as s:
                if s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM:
                    continue
                got = tcp_bytes(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN))
        except OSError:
            continue
        if got is not None:
            out[st.st_ino] = got
    return out


# --- NVML ------------------------------------------------------------------------------------


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Nvml:
    """The few NVML calls we need, over a loaded library (real, or a test's stand-in)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    @staticmethod
    def load() -> tuple[Nvml | None, str | None]:
        """(Nvml, None) when NVML works and sees a GPU; (None, why not) otherwise."""
        try:
            lib = ctypes.CDLL(NVML_LIB)
        except OSError as exc:
            return None, f"no NVML library ({NVML_LIB}: {exc}); no NVIDIA driver on this node"
        nvml = Nvml(lib)
        code = lib.nvmlInit_v2()
        if code != 0:
            return None, f"nvmlInit failed (NVML error {code})"
        n = nvml.count()
        if n == 0:
            return None, "NVML sees no GPU"
        return nvml, None

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed (NVML error {code})")

    def count(self) -> int:
        n = ctypes.c_uint(0)
        self._check(self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n)), "nvmlDeviceGetCount")
        return int(n.value)

    def sample(self, index: int) -> dict[str, Any]:
        handle = ctypes.c_void_p()
        self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)), "nvmlDeviceGetHandleByIndex")
        util, mem = _Utilization(), _Memory()
        self._check(self.lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(util)), "nvmlDeviceGetUtilizationRates")
        self._check(self.lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)), "nvmlDeviceGetMemoryInfo")
        name = ctypes.create_string_buffer(96)
        self._check(self.lib.nvmlDeviceGetName(handle, name, 96), "nvmlDeviceGetName")
        return {
            "index": index,
            "name": name.value.decode(errors="replace"),
            "utilization_percent": int(util.gpu),
            "memory_used_bytes": int(mem.used),
            "memory_total_bytes": int(mem.total),
        }


def visible_gpus(count: int, env: dict[str, str] | None = None) -> list[int]:
    """NVML indices this process may use: CUDA_VISIBLE_DEVICES when it lists indices, else all."""
    raw = (env if env is not None else os.environ).get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(range(count))
    picked = [int(p) for p in raw.split(",") if p.strip().isdigit()]
    return [i for i in picked if i < count]


@dataclass
class GpuStats:
    """Per device: mean and peak utilisation and peak memory over the samples taken."""

    devices: dict[int, dict[str, Any]] = field(default_factory=dict)

    def add(self, sample: dict[str, Any]) -> None:
        d = self.devices.setdefault(
            int(sample["index"]),
            {
                "index": int(sample["index"]),
                "name": sample["name"],
                "samples": 0,
                "utilization_sum": 0,
                "utilization_peak_percent": 0,
                "memory_peak_bytes": 0,
                "memory_total_bytes": int(sample["memory_total_bytes"]),
            },
        )
        d["samples"] += 1
        d["utilization_sum"] += int(sample["utilization_percent"])
        d["utilization_peak_percent"] = max(d["utilization_peak_percent"], int(sample["utilization_percent"]))
        d["memory_peak_bytes"] = max(d["memory_peak_bytes"], int(sample["memory_used_bytes"]))

    def report(self) -> list[dict[str, Any]]:
        out = []
        for d in self.devices.values():
            n = max(1, d["samples"])
            out.append(
                {
                    "index": d["index"],
                    "name": d["name"],
                    "utilization_mean_percent": round(d["utilization_sum"] / n, 1),
                    "utilization_peak_percent": d["utilization_peak_percent"],
                    "memory_peak_bytes": d["memory_peak_bytes"],
                    "memory_total_bytes": d["memory_total_bytes"],
                    "samples": d["samples"],
                }
            )
        return out


# --- the sampler ------------------------------------------------------------------------------


@dataclass
class WorkerTelemetry:
    rank: int
    pid: int
    cpu_percent: float
    peak_rss_bytes: int
    net_bytes_sent: int
    net_bytes_recv: int
    samples: int
    samples_per_s: float
    elapsed_s: float
    gpu: list[dict[str, Any]] | None = None
    gpu_absent_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Sampler:
    """Measures the calling process from ``start()`` on; a daemon thread samples the sockets
    (and GPUs) every ``interval_s``; ``count()`` is called by the loop with the samples trained."""

    def __init__(self, rank: int, interval_s: float = 1.0, nvml: tuple[Nvml | None, str | None] | None = None) -> None:
        self.rank = rank
        self.interval_s = interval_s
        self.proc = psutil.Process()
        self._nvml = nvml
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples = 0
        self._t0 = time.monotonic()
        self._cpu0 = 0.0
        self._base: dict[int, tuple[int, int]] = {}
        self._last: dict[int, tuple[int, int]] = {}
        self._gpu = GpuStats()
        self._gpu_reason: str | None = None

    def start(self) -> Sampler:
        self._t0 = time.monotonic()
        t = self.proc.cpu_times()
        self._cpu0 = t.user + t.system
        # Bytes on sockets open before training are not training's: start from their count now.
        self._base = socket_bytes()
        self._last = dict(self._base)
        if self._nvml is None:
            self._nvml = Nvml.load()
        nvml, self._gpu_reason = self._nvml
        self._gpus = visible_gpus(nvml.count()) if nvml is not None else []
        if nvml is not None and not self._gpus:
            self._gpu_reason = "NVML sees GPUs, but none is visible to this worker (CUDA_VISIBLE_DEVICES)"
        self._sample()
        self._thread = threading.Thread(target=self._run, name=f"telemetry-{self.rank}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def count(self, samples: int) -> None:
        self._samples += samples

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        now = socket_bytes()
        gpu_samples = []
        nvml = self._nvml[0] if self._nvml else None
        if nvml is not None:
            for i in self._gpus:
                try:
                    gpu_samples.append(nvml.sample(i))
                except RuntimeError as exc:
                    self._gpu_reason = str(exc)
        with self._lock:
            self._last.update(now)
            for s in gpu_samples:
                self._gpu.add(s)

    def snapshot(self) -> WorkerTelemetry:
        self._sample()
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        t = self.proc.cpu_times()
        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB
        with self._lock:
            sent = sum(s - self._base.get(ino, (0, 0))[0] for ino, (s, _) in self._last.items())
            recv = sum(r - self._base.get(ino, (0, 0))[1] for ino, (_, r) in self._last.items())
            gpus = self._gpu.report() if self._gpu.devices else None
        return WorkerTelemetry(
            rank=self.rank,
            pid=self.proc.pid,
            cpu_percent=round(100.0 * (t.user + t.system - self._cpu0) / elapsed, 1),
            peak_rss_bytes=max(peak, int(self.proc.memory_info().rss)),
            net_bytes_sent=int(sent),
            net_bytes_recv=int(recv),
            samples=self._samples,
            samples_per_s=round(self._samples / elapsed, 1),
            elapsed_s=round(elapsed, 3),
            gpu=gpus,
            gpu_absent_reason=None if gpus else (self._gpu_reason or "no GPU sample taken"),
        )


def summary(workers: list[dict[str, Any]]) -> dict[str, Any]:
    """What result.json carries: every worker, and the GPU verdict said once."""
    gpus = [w["gpu"] for w in workers if w.get("gpu")]
    reasons = sorted({str(w.get("gpu_absent_reason")) for w in workers if not w.get("gpu")})
    return {
        "workers": sorted(workers, key=lambda w: int(w.get("rank", 0))),
        "gpu": [d for g in gpus for d in g] if gpus else None,
        "gpu_absent_reason": None if gpus else ("; ".join(reasons) or "no worker reported"),
    }
