"""Where a rank's restore went, for ``train_started``'s ``restore_phases`` (rank 0's) and
benchmarks/sharded.py's breakdown: reading (the transfer and its verification, which
overlap: each file is hashed while its later ranges stream in), of that the hashing
alone, deserialising (``torch.load``), copying into the model and optimizer, and handing
rank 0's verified files to the other ranks over the collective (``handover``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from recovery.fetch import hashed_s

T = TypeVar("T")


@dataclass
class RestoreClock:
    read_s: float = 0.0
    verify_s: float = 0.0  # of read_s: hashing what was read
    deserialize_s: float = 0.0
    copy_in_s: float = 0.0
    handover_s: float = 0.0

    def read(self, fn: Callable[[], T]) -> T:
        """``fn()``, a read of verified bytes, timed as reading (its hashing as verifying)."""
        began, hashed = time.perf_counter(), hashed_s()
        try:
            return fn()
        finally:
            self.read_s += time.perf_counter() - began
            self.verify_s += hashed_s() - hashed

    @contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        """Time the block as ``phase``: ``deserialize_s``, ``copy_in_s`` or ``handover_s``."""
        began = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, phase, getattr(self, phase) + time.perf_counter() - began)

    def fields(self, choose_s: float | None) -> dict[str, float]:
        """The phases as journaled, in seconds; ``choose_s``: rank 0's choice (None: none made)."""
        out = {
            "read_s": self.read_s,
            "verify_s": self.verify_s,
            "deserialize_s": self.deserialize_s,
            "copy_in_s": self.copy_in_s,
            "handover_s": self.handover_s,
        }
        if choose_s is not None:
            out = {"choose_s": choose_s, **out}
        return {k: round(v, 4) for k, v in out.items()}
