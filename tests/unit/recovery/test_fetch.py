"""Reading a checkpoint's files in ranges, verified as they stream in (recovery/fetch.py)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

import recovery.store as store_module
from recovery.fetch import fetch, plan_ranges
from recovery.store import MULTIPART_CHUNK, _md5_matches, multipart_etag

pytestmark = pytest.mark.unit


def test_plan_ranges_covers_the_file_and_asks_one_byte_past_its_end() -> None:
    assert plan_ranges(10, chunk=10) == []  # small: one whole read
    assert plan_ranges(0, chunk=10) == []
    assert plan_ranges(25, chunk=10) == [(0, 10), (10, 20), (20, 26)]
    assert plan_ranges(20, chunk=10) == [(0, 10), (10, 21)]


class RangedFs:
    """An object store's ranged reads over a dict (HTTP semantics: an overlong end is
    clipped, a start past the end is refused)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.calls: list[tuple[str, int | None, int | None]] = []

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        self.calls.append((path, start, end))
        if path not in self.objects:
            raise FileNotFoundError(path)
        data = self.objects[path]
        if start is None:
            return data
        if start >= len(data):
            raise OSError("The requested range is not satisfiable")
        return data[start:end]


def test_fetch_reads_ranges_hashes_in_order_and_reports_missing_files(monkeypatch: Any) -> None:
    monkeypatch.setattr("recovery.fetch.RANGE_BYTES", 4)
    fs = RangedFs({"a": b"0123456789", "b": b"xy"})
    got = fetch(fs, {"a": 10, "b": 2, "gone": 3})
    assert got["a"].data == b"0123456789" and got["a"].sha256 == hashlib.sha256(b"0123456789").hexdigest()
    assert got["b"].data == b"xy"
    assert got["gone"].data is None and got["gone"].sha256 is None
    assert sorted(c for c in fs.calls if c[0] == "a") == [("a", 0, 4), ("a", 4, 8), ("a", 8, 11)]


def test_a_longer_or_shorter_object_reads_back_at_its_true_length(monkeypatch: Any) -> None:
    monkeypatch.setattr("recovery.fetch.RANGE_BYTES", 4)
    fs = RangedFs({"long": b"0123456789!", "short": b"012345"})
    got = fetch(fs, {"long": 10, "short": 10})
    assert got["long"].data == b"0123456789!"  # the byte past the end shows
    # A range past a shorter object's end is refused: the file is read whole instead.
    assert got["short"].data == b"012345"
    assert ("short", None, None) in fs.calls


def test_a_store_error_other_than_a_missing_file_propagates() -> None:
    class Broken(RangedFs):
        def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
            raise TimeoutError("read timed out")

    with pytest.raises(TimeoutError):
        fetch(Broken({}), {"a": 3}, ranged=False)


def test_the_multipart_etag_is_the_md5_of_the_parts_md5s() -> None:
    data = b"a" * 10 + b"b" * 5
    parts = [hashlib.md5(b"a" * 10).digest(), hashlib.md5(b"b" * 5).digest()]
    assert multipart_etag(data, chunk=10) == hashlib.md5(b"".join(parts)).hexdigest() + "-2"


def test_md5_matches_a_multipart_etag_cut_like_s3fs_and_declines_other_cuts(monkeypatch: pytest.MonkeyPatch) -> None:
    assert MULTIPART_CHUNK == 50 * 2**20  # s3fs's part size
    # The rule, not the size: parts of 4 KiB here (cut as the store cuts them) keep the test fast.
    monkeypatch.setattr(store_module, "MULTIPART_CHUNK", 4096)
    data = b"\0" * (4096 + 1)
    assert _md5_matches({"ETag": f'"{multipart_etag(data, chunk=4096)}"'}, data) is True
    assert _md5_matches({"ETag": f'"{multipart_etag(data, chunk=4096)}"'}, data[:-1] + b"\1") is False
    assert _md5_matches({"ETag": f'"{multipart_etag(data, chunk=1024)}"'}, data) is None
    assert _md5_matches({"ETag": hashlib.md5(data).hexdigest()}, data) is True
    assert _md5_matches({}, data) is None


class SizedFs(RangedFs):
    def info(self, path: str) -> dict[str, Any]:
        return {"size": len(self.objects[path])}


def test_a_file_streamed_to_disk_is_hashed_and_written_in_order_a_few_ranges_at_a_time(tmp_path: Any) -> None:
    import threading
    import time

    from recovery.fetch import fetch_to_file

    data = bytes(range(256)) * 4  # 1024 bytes: 16 ranges of 64
    in_flight, most = [0], [0]
    lock = threading.Lock()

    class Slow(SizedFs):
        def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
            time.sleep(0.002)
            try:
                return super().cat_file(path, start, end)
            finally:
                with lock:
                    in_flight[0] -= 1

    fs = Slow({"a": data})
    got = fetch_to_file(fs, "a", len(data), str(tmp_path / "a"), chunk=64, in_flight=3)
    assert (got.size, got.sha256, got.reason) == (1024, hashlib.sha256(data).hexdigest(), "")
    assert (tmp_path / "a").read_bytes() == data
    # Never more ranges held than in flight: the buffer budget, not the file.
    assert 1 <= most[0] <= 3 and len(fs.calls) == 16


def test_a_streamed_file_reads_back_at_its_true_length_and_a_lost_range_is_the_stores_error(tmp_path: Any) -> None:
    from recovery.fetch import fetch_to_file

    fs = SizedFs({"long": b"0123456789!", "short": b"012345"})
    longer = fetch_to_file(fs, "long", 10, str(tmp_path / "long"), chunk=4, in_flight=2)
    assert longer.size == 11 and (tmp_path / "long").read_bytes() == b"0123456789!"
    # A range past a shorter object's end is refused: the stream ends there, short.
    shorter = fetch_to_file(fs, "short", 10, str(tmp_path / "short"), chunk=4, in_flight=2)
    assert shorter.size == 6 and shorter.sha256 == hashlib.sha256(b"012345").hexdigest()
    gone = fetch_to_file(fs, "gone", 10, str(tmp_path / "gone"), chunk=4)
    assert (gone.size, gone.sha256) == (0, None)

    class Flaky(SizedFs):
        def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
            if start == 4:
                raise TimeoutError("read timed out")
            return super().cat_file(path, start, end)

    with pytest.raises(TimeoutError):  # the object is whole: no short read, the store's error
        fetch_to_file(Flaky({"a": b"0123456789"}), "a", 10, str(tmp_path / "flaky"), chunk=4)


def test_a_checkpoint_file_read_to_disk_is_verified_and_one_that_fails_is_removed(
    tmp_path: Any, write_checkpoint: Any
) -> None:
    from pathlib import Path

    from recovery.manifest import ManifestError
    from recovery.store import CheckpointStore, StoreError
    from tests.support.stores import TEST_KEY

    store = CheckpointStore(f"file://{tmp_path}/store", key=TEST_KEY)
    data = b"weights " * 1000
    m = write_checkpoint(store, "r", 10, files={"shard-r0.pt": data})
    dest = tmp_path / "local.pt"
    store.read_to_file(m, "shard-r0.pt", str(dest))
    assert dest.read_bytes() == data
    folder = Path(store.manifest_path(m).removeprefix("file://"))
    (folder / "shard-r0.pt").write_bytes(b"Weights " + data[8:])
    with pytest.raises(ManifestError, match=r"shard-r0\.pt does not match its manifest"):
        store.read_to_file(m, "shard-r0.pt", str(tmp_path / "bad.pt"))
    assert not (tmp_path / "bad.pt").exists()
    (folder / "shard-r0.pt").unlink()
    with pytest.raises(StoreError, match="cannot read"):
        store.read_to_file(m, "shard-r0.pt", str(tmp_path / "gone.pt"))
    assert not (tmp_path / "gone.pt").exists()
