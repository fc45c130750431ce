"""The copy on scratch: kept, read back only when it is the chosen checkpoint, a full disk
journaled once per episode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.runtime.checkpoint.scratch import LocalCopy, ScratchKeeper
from recovery.manifest import FileEntry, Manifest
from recovery.store import sha256_hex

pytestmark = pytest.mark.unit
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
    keeper = ScratchKeeper(disk, lambda t, f: events.append((t, f)))  # type: ignore[arg-type]
    keeper.keep(manifest(20), FILES)
    keeper.keep(manifest(40), FILES)
    disk.full = False
    keeper.keep(manifest(60), FILES)
    keeper.keep(manifest(80), FILES)
    kinds: list[Any] = [t for t, _ in events]
    assert kinds == ["scratch_full", "scratch_recovered"]
    assert events[0][1]["step"] == 20 and "No space" in events[0][1]["error"]
    assert events[1][1] == {"step": 60, "path": "/scratch"}
