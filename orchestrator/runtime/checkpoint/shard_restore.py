"""A sharded checkpoint's rank files, read for a restore: each streamed to this node's
disk and verified as it arrives (``CheckpointStore.read_to_file``), then loaded
memory-mapped. A rank holds a few ranges in flight and the rows it copies into its
model, never a whole shard file in memory, so a restore's peak memory does not grow
with the checkpoint."""

from __future__ import annotations

import io
import mmap
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from orchestrator.runtime.checkpoint.restore_clock import RestoreClock
from orchestrator.runtime.checkpoint.shard_index import rank_of_file


class ShardFileError(ValueError):
    """A rank file that verifies against its signed manifest but holds no dict of tensors."""


@dataclass
class ShardFiles:
    """The rank files read: by saved rank, each file's tensors, mapped from ``folder``."""

    folder: str
    loaded: dict[int, dict[str, Any]] = field(default_factory=dict)

    def take(self, name: str, data: bytes | mmap.mmap) -> None:
        """Rank file ``name`` from verified bytes already at hand (a survivor's own: the
        file it spilled, mapped, read in place rather than copied whole first)."""
        if isinstance(data, mmap.mmap):
            data.seek(0)
            tensors = torch.load(data, weights_only=True, map_location="cpu")  # type: ignore[arg-type]
        else:
            tensors = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        if not isinstance(tensors, dict):
            raise ShardFileError(f"{name} does not hold a dict of tensors")
        self.loaded[rank_of_file(name)] = tensors

    def close(self) -> None:
        """Forget the tensors and remove the files (a mapping outlives its file's name)."""
        self.loaded.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


def read_shards(
    source: Any,
    manifest: Any,
    names: Iterable[str],
    clock: RestoreClock,
    scratch: str | None = None,
    held: Mapping[str, Any] | None = None,
) -> ShardFiles:
    """``names`` (rank files of ``manifest``) from ``source`` into a new folder under
    ``scratch`` (the system's temporary folder when None), each verified as it streams in
    and loaded mapped, timed on ``clock``; one in ``held`` (verified bytes already at hand:
    a survivor's own) taken from there instead. A file that does not verify is a
    ManifestError, the folder removed."""
    # The node's scratch disk when it has one here (the rank files of a 70B model want a
    # disk, not a tmpfs), else the system's temporary folder.
    where = scratch if scratch is not None and os.path.isdir(scratch) else None
    out = ShardFiles(tempfile.mkdtemp(prefix=f"orch-shards-step{manifest.step}-", dir=where))
    held = held or {}
    try:
        for name in names:
            if name in held:
                with clock.timing("deserialize_s"):
                    out.take(name, held[name])
                continue
            dest = os.path.join(out.folder, name)
            clock.read(lambda name=name, dest=dest: source.read_to_file(manifest, name, dest))
            with clock.timing("deserialize_s"):
                tensors = torch.load(dest, weights_only=True, mmap=True, map_location="cpu")
            if not isinstance(tensors, dict):
                raise ShardFileError(f"{name} does not hold a dict of tensors")
            out.loaded[rank_of_file(name)] = tensors
    except BaseException:
        out.close()
        raise
    return out
