"""The live progress line: region, step/total, steps/s, last checkpoint, replication lag."""

from __future__ import annotations

import time
from typing import Any, TextIO

from orchestrator.hpo import progress_text as search_text
from orchestrator.runtime.telemetry import progress_text as telemetry_text

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

    def close(self) -> None:
        if self.enabled and self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
