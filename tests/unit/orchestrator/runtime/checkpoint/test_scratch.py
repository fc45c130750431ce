"""The worker's local copy of its newest checkpoint (orchestrator/runtime/checkpoint/scratch.py):
replaced whole, read back only for the same checkpoint, never a partial copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.runtime.checkpoint.scratch import CURRENT, LocalCopy
from recovery.store import CheckpointStore
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
