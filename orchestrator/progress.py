"""The live progress line: region, step/total, steps/s, last checkpoint, replication lag."""

from __future__ import annotations

import time
from typing import Any, TextIO

from orchestrator.hpo import progress_text as search_text

NON_TTY_EVERY_S = 5.0


class ProgressLine:
    def __init__(self, stream: TextIO, enabled: bool = True) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._lag: float | None = None
        self._last_text = ""
        self._last_print = 0.0
        self._last_ckpt: str | None = None
        self._drawn = False

    def replication_lag(self, lag_s: float) -> None:
        self._lag = lag_s

    def update(self, region: str, generation: int, prog: dict[str, Any]) -> None:
        if not self.enabled:
            return
        ckpt = prog.get("last_checkpoint")
        ckpt_name = ckpt.rstrip("/").rsplit("/", 1)[-1] if ckpt else "none"
        rate = float(prog.get("steps_per_s") or 0.0)
        loss = prog.get("loss")
        text = (
            f"[{region} g{generation}] step {prog.get('step', 0)}/{prog.get('total', '?')}"
            f"  {rate:6.1f} steps/s"
            + (f"  loss {float(loss):.4f}" if loss is not None else "")
            + f"  ckpt {ckpt_name}"
            + (f"  repl lag {self._lag:.2f}s" if self._lag is not None else "")
            + search_text(prog)
            + telemetry_text(prog.get("telemetry"))
        )
        now = time.time()
        if self.tty:
            self.stream.write("\r\033[K" + text)
            self._drawn = True
            self.stream.flush()
        elif ckpt != self._last_ckpt or now - self._last_print >= NON_TTY_EVERY_S:
            self.stream.write(text + "\n")
            self.stream.flush()
            self._last_print = now
        self._last_ckpt = ckpt
        self._last_text = text

    def note(self, message: str) -> None:
        if not self.enabled:
            return
        if self.tty and self._drawn:
            self.stream.write("\r\033[K")
        self.stream.write(f"-- {message}\n")
        if self.tty and self._last_text:
            self.stream.write(self._last_text)
        self.stream.flush()

    def log(self, line: str) -> None:
        """A line of the job's own output (show_logs=true), above the progress line;
        printed with the progress line off too (show_logs asked for it)."""
        if self.tty and self._drawn and self.enabled:
            self.stream.write("\r\033[K")
        self.stream.write(line + "\n")
        if self.tty and self._last_text and self.enabled:
            self.stream.write(self._last_text)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f}MB"


def telemetry_text(telemetry: dict[str, Any] | None) -> str:
    """The telemetry part of the progress line, over all workers."""
    if not telemetry or not telemetry.get("workers"):
        return ""
    ws = telemetry["workers"]
    cpu = sum(float(w["cpu_percent"]) for w in ws) / len(ws)
    rss = max(int(w["peak_rss_bytes"]) for w in ws)
    sent = sum(int(w["net_bytes_sent"]) for w in ws)
    recv = sum(int(w["net_bytes_recv"]) for w in ws)
    rate = sum(float(w["samples_per_s"]) for w in ws)
    gpu = telemetry.get("gpu")
    gpu_text = "gpu " + ",".join(f"{d['utilization_mean_percent']:.0f}%" for d in gpu) if gpu else "gpu absent"
    return (
        f"  {len(ws)}w cpu {cpu:.0f}% rss {_mb(rss)} net {_mb(sent)} out/{_mb(recv)} in"
        f"  {rate:.0f} samples/s  {gpu_text}"
    )
