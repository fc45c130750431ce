"""A rank's shards file serialised straight to the node's disk, hashed as it is written.

``torch.save`` into a ``BytesIO`` holds the shard twice while it serialises (the
tensors copied to the host, and their bytes), and the buffer grows by reallocation.
Written to a file instead, through a writer that hashes each chunk as it passes, the
rank holds its tensors alone; once they are freed, the file's bytes are a read-only
mapping: page cache the kernel may drop and read again, not memory the process owns.
The bytes are the same as ``BytesIO``'s (the same serialiser, written in order), so
the digest, the store's MD5 and the node's copy do not change.

The file is unlinked as soon as it is mapped: the mapping keeps it on disk while any
holder (the uploader, the node's copy, the survivors' held snapshots) still has it, and
no crash leaves it behind.
"""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import tempfile
from typing import Any, NamedTuple

import torch


class Spilled(NamedTuple):
    """A serialised object: its bytes (mapped read-only, or in memory where the disk
    refused them) and their sha256."""

    data: mmap.mmap | bytes
    sha256: str


class _HashingWriter:
    """What ``torch.save`` writes, passed to a file and hashed on the way (write-only:
    the serialiser writes its zip archive in order)."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.digest = hashlib.sha256()

    def write(self, data: Any) -> int:
        self.digest.update(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


def spill(obj: Any, folder: str | None) -> Spilled:
    """``torch.save(obj)`` into a new file under ``folder`` (the system's temporary folder
    where ``folder`` is None or missing on this node), hashed as it is written, mapped
    read-only and unlinked. A disk that refuses it (full, read-only) costs the bound,
    not the checkpoint: the object is serialised in memory instead."""
    where = folder if folder is not None and os.path.isdir(folder) else None
    try:
        fd, path = tempfile.mkstemp(prefix="orch-spill-", suffix=".pt", dir=where)
    except OSError:
        return _in_memory(obj)
    try:
        with os.fdopen(fd, "wb") as out:
            writer = _HashingWriter(out)
            torch.save(obj, writer)
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError:
        return _in_memory(obj)
    finally:
        os.unlink(path)
    return Spilled(data, writer.digest.hexdigest())


def _in_memory(obj: Any) -> Spilled:
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    return Spilled(data, hashlib.sha256(data).hexdigest())
