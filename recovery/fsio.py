"""Small fsspec helpers shared by the checkpoint store and the control channel."""

from __future__ import annotations

import os
import uuid
from typing import Any


def is_local(fs: Any) -> bool:
    proto = fs.protocol
    return "file" in ((proto,) if isinstance(proto, str) else tuple(proto))


def write_bytes(fs: Any, path: str, data: bytes, durable: bool = True) -> None:
    """Write a whole object so a reader sees the old bytes or the new, never a part.
    ``durable=False`` skips the fsync, for what a crash may lose (heartbeats, progress)."""
    if is_local(fs):
        # Object stores publish a PUT atomically; a local file needs rename, and fsync
        # so that "written" survives a crash of the machine.
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    else:
        fs.pipe_file(path, data)
