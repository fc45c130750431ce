"""A sharded checkpoint's rank files streamed to disk, verified and mapped for a restore
(orchestrator/runtime/checkpoint/shard_restore.py)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.runtime.checkpoint.restore_clock import RestoreClock
from orchestrator.runtime.checkpoint.shard_restore import ShardFileError, read_shards
from recovery.manifest import ManifestError
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY

pytestmark = pytest.mark.unit


def _saved(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.fixture
def checkpoint(tmp_path: Path, write_checkpoint: Any) -> tuple[CheckpointStore, Any, dict[str, torch.Tensor]]:
    store = CheckpointStore(f"file://{tmp_path}/store", key=TEST_KEY)
    r1 = {"model/w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}
    files = {"shard-r0.pt": _saved({"model/w": torch.zeros(3, 4)}), "shard-r1.pt": _saved(r1), "bad.pt": _saved([1])}
    return store, write_checkpoint(store, "r", 8, files=files), r1


def test_the_files_a_rank_needs_are_mapped_from_disk_and_removed_when_done(tmp_path: Path, checkpoint: Any) -> None:
    store, m, r1 = checkpoint
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    clock = RestoreClock()
    shards = read_shards(store, m, ["shard-r1.pt"], clock, str(scratch))
    assert list(shards.loaded) == [1] and torch.equal(shards.loaded[1]["model/w"], r1["model/w"])
    # Mapped from the node's disk, not read into memory; timed as read and deserialised.
    assert Path(shards.folder).parent == scratch and (Path(shards.folder) / "shard-r1.pt").exists()
    assert str(Path(shards.folder) / "shard-r1.pt") in Path("/proc/self/maps").read_text()
    assert clock.read_s > 0 and clock.verify_s > 0 and clock.deserialize_s > 0
    shards.close()
    assert not Path(shards.folder).exists() and shards.loaded == {}


def test_a_file_that_fails_its_manifest_or_holds_no_dict_leaves_nothing_behind(tmp_path: Path, checkpoint: Any) -> None:
    store, m, _ = checkpoint
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(ShardFileError, match=r"bad\.pt does not hold a dict of tensors"):
        read_shards(store, m, ["shard-r0.pt", "bad.pt"], RestoreClock(), str(scratch))
    folder = Path(store.manifest_path(m).removeprefix("file://"))
    data = bytearray((folder / "shard-r1.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "shard-r1.pt").write_bytes(bytes(data))
    with pytest.raises(ManifestError, match=r"shard-r1\.pt does not match its manifest"):
        read_shards(store, m, ["shard-r0.pt", "shard-r1.pt"], RestoreClock(), str(scratch))
    assert list(scratch.iterdir()) == []
    # A scratch folder this node lacks: the system's temporary folder instead.
    shards = read_shards(store, m, ["shard-r0.pt"], RestoreClock(), str(tmp_path / "no-such-disk"))
    assert Path(shards.folder).exists()
    shards.close()


def test_a_survivors_own_file_is_taken_from_its_bytes_beside_one_streamed_from_the_store(
    tmp_path: Path, checkpoint: Any
) -> None:
    store, m, _ = checkpoint
    shards = read_shards(store, m, ["shard-r1.pt"], RestoreClock(), str(tmp_path))
    shards.take("shard-r0.pt", _saved({"model/w": torch.ones(3, 4)}))
    assert sorted(shards.loaded) == [0, 1] and torch.equal(shards.loaded[0]["model/w"], torch.ones(3, 4))
    assert not (Path(shards.folder) / "shard-r0.pt").exists(), "taken from memory, not written out"
    with pytest.raises(ShardFileError, match=r"shard-r0\.pt does not hold a dict of tensors"):
        shards.take("shard-r0.pt", _saved([1, 2]))
    shards.close()
    # Named with the ones to stream: a held one is taken from its bytes, the others read.
    held = {"shard-r0.pt": _saved({"model/w": torch.ones(3, 4)})}
    both = read_shards(store, m, ["shard-r0.pt", "shard-r1.pt"], RestoreClock(), str(tmp_path), held)
    assert torch.equal(both.loaded[0]["model/w"], torch.ones(3, 4)) and (Path(both.folder) / "shard-r1.pt").exists()
    assert not (Path(both.folder) / "shard-r0.pt").exists()
    both.close()
    bad = {"shard-r0.pt": _saved([1])}
    with pytest.raises(ShardFileError, match=r"shard-r0\.pt"):
        read_shards(store, m, ["shard-r1.pt", "shard-r0.pt"], RestoreClock(), str(tmp_path), bad)
