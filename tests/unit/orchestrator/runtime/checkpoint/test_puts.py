"""Concurrent puts into one store: the largest first, the hook once, no put outliving the call."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from orchestrator.runtime.checkpoint.puts import put_all, put_order
from recovery.manifest import FileEntry
from recovery.store import StoreError, sha256_hex

pytestmark = pytest.mark.unit
FILES = {"b.pt": b"x" * 10, "a.pt": b"y" * 10, "big.pt": b"z" * 100, "tiny.pt": b"t"}


class Store:
    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.fail = set(fail)
        self.lock = threading.Lock()
        self.ended: list[str] = []

    def put(self, run_id: str, step: int, name: str, data: bytes, generation: int | None = None) -> FileEntry:
        try:
            if name in self.fail:
                raise StoreError(f"cannot write {name}")
            return FileEntry(name, len(data), sha256_hex(data))
        finally:
            with self.lock:
                self.ended.append(name)


def test_put_order_is_the_largest_first_ties_by_name() -> None:
    assert put_order(FILES, FILES) == ["big.pt", "a.pt", "b.pt", "tiny.pt"]
    assert put_order(FILES, ["tiny.pt", "b.pt"]) == ["b.pt", "tiny.pt"]


def test_every_named_file_is_put_and_the_hook_runs_once() -> None:
    store, calls = Store(), []
    with ThreadPoolExecutor(max_workers=2) as pool:
        entries = put_all(pool, store, "run", 20, FILES, ["big.pt", "a.pt", "tiny.pt"], lambda: calls.append(1))  # type: ignore[arg-type]
    assert sorted(e.name for e in entries) == ["a.pt", "big.pt", "tiny.pt"]
    assert calls == [1]


def test_a_failure_is_raised_after_every_put_has_ended() -> None:
    store = Store(fail=("big.pt",))
    with ThreadPoolExecutor(max_workers=1) as pool:
        with pytest.raises(StoreError, match=r"big\.pt"):
            put_all(pool, store, "run", 20, FILES, FILES)  # type: ignore[arg-type]
        # Read before the pool shuts down: every put of the call had ended when it raised.
        ended = sorted(store.ended)
    assert ended == sorted(FILES)
