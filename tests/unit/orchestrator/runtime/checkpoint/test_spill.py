"""A rank's shards spilled to disk: the same bytes and digest as serialised in memory,
mapped read-only, and no file left behind."""

from __future__ import annotations

import hashlib
import io
import mmap
from pathlib import Path

import pytest
import torch

from orchestrator.runtime.checkpoint.shard_restore import ShardFiles
from orchestrator.runtime.checkpoint.spill import spill

pytestmark = pytest.mark.unit


def test_a_spilled_file_is_the_bytes_torch_save_writes_in_memory_hashed_mapped_and_unlinked(tmp_path: Path) -> None:
    tensors = {"model/w": torch.arange(1000, dtype=torch.float32), "optimizer/m": torch.ones(7, 3)}
    buf = io.BytesIO()
    torch.save(tensors, buf)
    spilled = spill(tensors, str(tmp_path))
    assert isinstance(spilled.data, mmap.mmap) and spilled.data[:] == buf.getvalue()
    assert spilled.sha256 == hashlib.sha256(buf.getvalue()).hexdigest()
    assert list(tmp_path.iterdir()) == [], "unlinked once mapped: no crash leaves it behind"
    with pytest.raises(TypeError):
        spilled.data[0] = 1  # type: ignore[index]  # read-only
    # A survivor's own file is loaded from the mapping as it is (ShardFiles.take), twice alike.
    shards = ShardFiles(str(tmp_path / "none"))
    for _ in range(2):
        shards.take("shard-r3.pt", spilled.data)
        assert torch.equal(shards.loaded[3]["model/w"], tensors["model/w"])


def test_a_folder_this_node_lacks_spills_to_the_temporary_folder(tmp_path: Path) -> None:
    spilled = spill({"w": torch.zeros(3)}, str(tmp_path / "no-such-disk"))
    assert len(spilled.data) > 0 and not (tmp_path / "no-such-disk").exists()


def test_a_disk_that_refuses_the_file_costs_the_bound_not_the_checkpoint(tmp_path: Path, monkeypatch) -> None:
    import orchestrator.runtime.checkpoint.spill as spill_module

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    tensors = {"w": torch.arange(5.0)}
    buf = io.BytesIO()
    torch.save(tensors, buf)
    # Full when the file is written: the object is serialised in memory instead.
    real_save = torch.save
    calls: list[str] = []

    def save(obj: object, f: object) -> None:
        calls.append(type(f).__name__)
        if not isinstance(f, io.BytesIO):
            full()
        real_save(obj, f)

    monkeypatch.setattr(spill_module.torch, "save", save)
    spilled = spill(tensors, str(tmp_path))
    assert calls == ["_HashingWriter", "BytesIO"] and spilled.data == buf.getvalue()
    assert spilled.sha256 == hashlib.sha256(buf.getvalue()).hexdigest() and list(tmp_path.iterdir()) == []
