"""Concurrent puts into one store: the largest first, the hook once, no put outliving the call."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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

    def put(
        self, run_id: str, step: int, name: str, data: bytes, generation: int | None = None, sha256: str | None = None
    ) -> FileEntry:
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


def test_a_digest_taken_already_is_listed_and_not_taken_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import recovery.store as store_module
    from orchestrator.runtime.checkpoint.puts import put_all
    from recovery.store import CheckpointStore

    hashed: list[int] = []
    real = store_module.sha256_hex
    monkeypatch.setattr(store_module, "sha256_hex", lambda data: hashed.append(len(data)) or real(data))
    store = CheckpointStore(f"file://{tmp_path}/s", region="a")
    files = {"shard-r0.pt": b"s" * 100, "state.pt": b"t" * 3}
    with ThreadPoolExecutor(2) as pool:
        entries = put_all(
            pool, store, "run", 4, files, list(files), digests={"shard-r0.pt": real(files["shard-r0.pt"])}
        )
    assert sorted((e.name, e.sha256) for e in entries) == sorted((n, real(d)) for n, d in files.items())
    assert hashed == [3]  # state.pt alone
