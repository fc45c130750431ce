"""A rank's copy of its newest checkpoints, and their exchange between ranks.

When survivors keep their processes, each rank keeps in memory the bytes of the files
it serialised for its newest checkpoints (DDP keeps the model and optimizer the same on
every rank, so every rank holds them; rank 0 holds every file). After the group forms
again, a rank that lacks a file of the committed checkpoint (a replacement lacks them
all) gets it from a rank that holds it, over the group, as raw bytes in a tensor: no
pickle. Whoever loads a file checks it against the signed manifest first, wherever it
came from; one that does not match is read from the store instead.
"""

from __future__ import annotations

import torch

from recovery.membership import Transfer

# Steps held: the newest snapshot may still be uploading when a rank is lost, so the
# newest committed one is kept too.
KEEP = 2


class HeldSnapshots:
    """The files of this rank's newest checkpoints, by step (at most ``KEEP`` steps)."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._held: dict[int, dict[str, bytes]] = {}

    def hold(self, step: int, files: dict[str, bytes]) -> None:
        self._held[step] = dict(files)
        for old in sorted(self._held)[: -self.keep]:
            del self._held[old]

    def at(self, step: int) -> dict[str, bytes]:
        return self._held.get(step, {})

    def steps(self) -> list[int]:
        return sorted(self._held)

    def corrupt(self, name: str = "model.pt") -> list[int]:
        """Chaos (``corrupt_peer_state``): flip a byte of ``name`` in every held step; the steps hit."""
        hit = []
        for step, files in self._held.items():
            data = files.get(name)
            if data:
                flipped = bytearray(data)
                flipped[len(flipped) // 2] ^= 0xFF
                files[name] = bytes(flipped)
                hit.append(step)
        return sorted(hit)


def _send(data: bytes, dst: int) -> None:
    import torch.distributed as dist

    dist.send(torch.tensor([len(data)], dtype=torch.int64), dst)
    if data:
        dist.send(torch.frombuffer(bytearray(data), dtype=torch.uint8), dst)


def _recv(src: int, limit: int) -> bytes | None:
    """The bytes ``src`` sends; None when it announces more than ``limit`` (the manifest's
    size of that file): they are drained but not kept."""
    import torch.distributed as dist

    size = torch.zeros(1, dtype=torch.int64)
    dist.recv(size, src)
    n = int(size.item())
    if n == 0:
        return b""
    buf = torch.empty(n, dtype=torch.uint8)
    dist.recv(buf, src)
    return None if n > limit else buf.numpy().tobytes()


def exchange(
    transfers: list[Transfer], rank: int, mine: dict[str, bytes], sizes: dict[str, int]
) -> dict[str, bytes | None]:
    """Run the plan: send what this rank is the source of, receive what it is the
    destination of (``sizes``: each file's size in the manifest). Every rank walks the
    same ordered list, each taking part in its own transfers only."""
    got: dict[str, bytes | None] = {}
    for t in transfers:
        if t.src == rank:
            _send(mine.get(t.name, b""), t.dst)
        elif t.dst == rank:
            got[t.name] = _recv(t.src, sizes.get(t.name, 0))
    return got
