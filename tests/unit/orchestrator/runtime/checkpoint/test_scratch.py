"""The worker's local copy of its newest checkpoint (orchestrator/runtime/checkpoint/scratch.py):
replaced whole, read back only for the same checkpoint, never a partial copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.runtime.checkpoint.scratch import CURRENT, LocalCopy, ScratchKeeper
from recovery.manifest import FileEntry, Manifest
from recovery.store import CheckpointStore, sha256_hex
from tests.support.stores import TEST_KEY, WriteCheckpoint

pytestmark = pytest.mark.unit


def test_the_copy_gives_back_the_checkpoint_it_holds_and_nothing_else(
    tmp_path: Path, memory_url: str, write_checkpoint: WriteCheckpoint
) -> None:
    store = CheckpointStore(memory_url, region="r", key=TEST_KEY)
    m1 = write_checkpoint(store, "run", 10, files={"model.pt": b"a", "sub/state.pt": b"b"})
    m2 = write_checkpoint(store, "run", 20, files={"model.pt": b"c"})
    copy = LocalCopy(str(tmp_path / "scratch"))
    assert copy.load(m1, ["model.pt"]) is None
    copy.keep(m1, {"model.pt": b"a", "sub/state.pt": b"b"})
    assert copy.load(m1, ["model.pt", "sub/state.pt"]) == {"model.pt": b"a", "sub/state.pt": b"b"}
    assert copy.load(m2, ["model.pt"]) is None
    copy.keep(m2, {"model.pt": b"c"})
    assert copy.load(m2, ["model.pt"]) == {"model.pt": b"c"} and copy.load(m1, ["model.pt"]) is None
    assert sorted(p.name for p in (tmp_path / "scratch").iterdir()) == [CURRENT]


def test_a_changed_byte_in_the_copy_is_no_copy(
    tmp_path: Path, memory_url: str, write_checkpoint: WriteCheckpoint
) -> None:
    store = CheckpointStore(memory_url, region="r", key=TEST_KEY)
    m = write_checkpoint(store, "run", 10, files={"model.pt": b"abc"})
    copy = LocalCopy(str(tmp_path))
    copy.keep(m, {"model.pt": b"abc"})
    (tmp_path / CURRENT / "model.pt").write_bytes(b"abd")
    assert copy.load(m, ["model.pt"]) is None


def test_a_failed_write_leaves_the_copy_before_it(
    tmp_path: Path, memory_url: str, write_checkpoint: WriteCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(memory_url, region="r", key=TEST_KEY)
    m1 = write_checkpoint(store, "run", 10, files={"model.pt": b"a"})
    m2 = write_checkpoint(store, "run", 20, files={"model.pt": b"b"})
    copy = LocalCopy(str(tmp_path))
    copy.keep(m1, {"model.pt": b"a"})
    real_open = open

    def full(path: str, mode: str = "r", *a: object, **k: object):
        if "incoming" in str(path) and "w" in mode:
            raise OSError(28, "No space left on device")
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr("builtins.open", full)
    with pytest.raises(OSError):
        copy.keep(m2, {"model.pt": b"b"})
    monkeypatch.undo()
    assert copy.load(m1, ["model.pt"]) == {"model.pt": b"a"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [CURRENT]


FILES = {"model.pt": b"weights", "sub/dir.pt": b"nested"}


def manifest(step: int, files: dict[str, bytes] = FILES) -> Manifest:
    entries = tuple(FileEntry(n, len(d), sha256_hex(d)) for n, d in sorted(files.items()))
    return Manifest("run", step, 1, entries, 1.0, "a")


def test_a_kept_copy_reads_back_for_its_own_manifest_only(tmp_path: Path) -> None:
    copy = LocalCopy(str(tmp_path / "scratch"))
    copy.keep(manifest(20), FILES)
    assert copy.load(manifest(20), list(FILES)) == FILES
    assert copy.load(manifest(40), list(FILES)) is None
    copy.keep(manifest(40), FILES)
    assert copy.load(manifest(20), list(FILES)) is None
    assert copy.load(manifest(40), ["model.pt"]) == {"model.pt": b"weights"}


class Full:
    """A LocalCopy on a disk that is full until told otherwise."""

    def __init__(self) -> None:
        self.root, self.full = "/scratch", True

    def keep(self, m: Manifest, files: dict[str, bytes]) -> None:
        if self.full:
            raise OSError(28, "No space left on device")


def test_a_full_disk_is_journaled_once_per_episode() -> None:
    disk, events = Full(), []
    keeper = ScratchKeeper(disk.root, lambda t, f: events.append((t, f)))
    for step in (20, 40):
        keeper.keep(step, lambda step=step: disk.keep(manifest(step), FILES))
    disk.full = False
    for step in (60, 80):
        keeper.keep(step, lambda step=step: disk.keep(manifest(step), FILES))
    kinds: list[Any] = [t for t, _ in events]
    assert kinds == ["scratch_full", "scratch_recovered"]
    assert events[0][1]["step"] == 20 and "No space" in events[0][1]["error"]
    assert events[1][1] == {"step": 60, "path": "/scratch"}


# --- a Ray Train function's ranks: each keeps what it puts; a restart reads its node's copies ---


def test_a_rank_copy_gives_what_the_chosen_manifest_lists_from_any_rank_on_the_node(
    tmp_path: Path, memory_url: str, write_checkpoint: WriteCheckpoint
) -> None:
    from orchestrator.runtime.checkpoint.scratch import RankCopy

    store = CheckpointStore(memory_url, region="r", key=TEST_KEY)
    files = {"model.pt": b"rank 0's", "opt/rank1.pt": b"rank 1's", "extra.pt": b"e"}
    m = write_checkpoint(store, "run", 10, files=files)
    zero, one = RankCopy(str(tmp_path), 0), RankCopy(str(tmp_path), 1)
    assert dict(zero.take(m, list(files))) == {}  # nothing kept yet
    zero.keep({"model.pt": b"rank 0's"})
    one.keep({"opt/rank1.pt": b"rank 1's", "extra.pt": b"a newer step's"})
    # extra.pt holds other bytes (a later report's, never committed): left to the store.
    assert dict(one.take(m, list(files))) == {"model.pt": b"rank 0's", "opt/rank1.pt": b"rank 1's"}
    one.keep({"opt/rank1.pt": b"rank 1's next"})  # replaced whole: the old files go
    assert dict(zero.take(m, list(files))) == {"model.pt": b"rank 0's"}
    assert sorted(p.name for p in (tmp_path / "function").iterdir()) == ["rank-0", "rank-1"]


def test_a_rank_copy_never_follows_a_link_and_a_full_disk_leaves_the_older_copy_whole(
    tmp_path: Path, memory_url: str, write_checkpoint: WriteCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.runtime.checkpoint.scratch import RankCopy

    store = CheckpointStore(memory_url, region="r", key=TEST_KEY)
    outside = tmp_path / "outside.pt"
    outside.write_bytes(b"w")
    m = write_checkpoint(store, "run", 10, files={"model.pt": b"w", "state.pt": b"s"})
    copy = RankCopy(str(tmp_path / "scratch"), 0)
    copy.keep({"state.pt": b"s"})
    (tmp_path / "scratch" / "function" / "rank-0" / "model.pt").symlink_to(outside)
    assert dict(copy.take(m, ["model.pt", "state.pt"])) == {"state.pt": b"s"}

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("builtins.open", full)
    with pytest.raises(OSError):
        copy.keep({"state.pt": b"t"})
    monkeypatch.undo()
    assert dict(copy.take(m, ["state.pt"])) == {"state.pt": b"s"}
    assert sorted(p.name for p in (tmp_path / "scratch" / "function").iterdir()) == ["rank-0"]
