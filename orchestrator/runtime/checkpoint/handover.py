"""Rank 0's verified files of the checkpoint a group restores, handed to every other rank
over the group's own collective: one download from the store, shared by the group.

Without it each rank read the same whole files from the store itself (a DDP group's
model and optimizer: as many downloads of the same bytes as ranks, over the same wire,
at once, each rank hashing its copy). Rank 0 read and verified them against the signed
manifest while it chose the checkpoint; the collective is the job's own channel (its
gradients take it), so a rank takes them as rank 0 verified them, hashed once.

Files go in chunks of ``CHUNK_BYTES``: a GPU group (NCCL) stages one chunk on the device
at a time, never a whole file.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch

CHUNK_BYTES = 64 * 2**20


def handed_over(
    rank: int, files: Mapping[str, bytes], sizes: Mapping[str, int], device: torch.device
) -> dict[str, bytes]:
    """A collective: every rank calls it with the same ``sizes`` (name -> bytes, in the
    same order: rank 0 took them from its ``files`` and broadcast them). Rank 0 sends its
    ``files``; every rank gets each named file's bytes back (rank 0 its own, untouched)."""
    import torch.distributed as dist

    out: dict[str, bytes] = {}
    for name, size in sizes.items():
        if rank == 0:
            data = files[name]
            with warnings.catch_warnings():
                # The sender's tensor is only read: a view of its immutable bytes is safe.
                warnings.simplefilter("ignore", UserWarning)
                whole = torch.frombuffer(data, dtype=torch.uint8) if size else None
            for start in range(0, size, CHUNK_BYTES):
                chunk = whole[start : start + CHUNK_BYTES]  # type: ignore[index]
                dist.broadcast(chunk if device.type == "cpu" else chunk.to(device), src=0)
            out[name] = data
            continue
        buf = bytearray(size)
        into = torch.frombuffer(buf, dtype=torch.uint8) if size else None
        for start in range(0, size, CHUNK_BYTES):
            view = into[start : start + CHUNK_BYTES]  # type: ignore[index]
            if device.type == "cpu":
                dist.broadcast(view, src=0)
            else:
                staged = torch.empty(view.numel(), dtype=torch.uint8, device=device)
                dist.broadcast(staged, src=0)
                view.copy_(staged.cpu())
        out[name] = bytes(buf)
    return out
