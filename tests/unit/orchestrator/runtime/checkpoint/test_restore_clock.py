"""Where a restore went, by phase (orchestrator.runtime.checkpoint.restore_clock.py)."""

from __future__ import annotations

import hashlib

import pytest
from fsspec.implementations.memory import MemoryFileSystem

from orchestrator.runtime.checkpoint.restore_clock import RestoreClock
from recovery.fetch import fetch, hashed_s

pytestmark = pytest.mark.unit


def test_a_read_counts_its_hashing_as_verifying_and_the_rest_apart() -> None:
    fs = MemoryFileSystem()
    data = b"x" * (3 * 2**20)
    fs.pipe_file("/clock/a.pt", data)
    clock = RestoreClock()
    before = hashed_s()
    got = clock.read(lambda: fetch(fs, {"/clock/a.pt": len(data)}, ranged=False))
    assert got["/clock/a.pt"].sha256 == hashlib.sha256(data).hexdigest()
    # The hashing is this thread's, counted once, and part of the read.
    assert hashed_s() > before
    assert 0 < clock.verify_s <= clock.read_s
    assert clock.verify_s == pytest.approx(hashed_s() - before)
    with clock.timing("deserialize_s"):
        pass
    with clock.timing("copy_in_s"):
        pass
    with clock.timing("handover_s"):
        pass
    fields = clock.fields(None)
    assert list(fields) == ["read_s", "verify_s", "deserialize_s", "copy_in_s", "handover_s"]
    assert list(clock.fields(0.123456)) == ["choose_s", *fields] and clock.fields(0.123456)["choose_s"] == 0.1235


def test_a_read_that_raises_is_still_timed() -> None:
    clock = RestoreClock()

    def fails() -> bytes:
        raise FileNotFoundError("gone")

    with pytest.raises(FileNotFoundError):
        clock.read(fails)
    assert clock.read_s > 0 and clock.verify_s == 0
