"""The newest committed checkpoint, kept on the node's local scratch disk too.

A worker group that Ray Train restarts in place finds it there and skips the
download. The store stays the truth: the copy is used only when its manifest is
the one restore chose and every file verifies. A full disk costs the copy, never
the checkpoint (``ScratchKeeper`` journals ``scratch_full``).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from typing import Any

from recovery.manifest import MANIFEST_NAME, Manifest
from recovery.store import sha256_hex

CURRENT = "current"


class LocalCopy:
    def __init__(self, root: str) -> None:
        self.root = root

    def keep(self, manifest: Manifest, files: dict[str, bytes]) -> None:
        """Replace the copy with this checkpoint; OSError (ENOSPC...) leaves no partial copy."""
        os.makedirs(self.root, exist_ok=True)
        tmp = os.path.join(self.root, f".incoming-{uuid.uuid4().hex[:8]}")
        try:
            os.makedirs(tmp)
            for name, data in files.items():
                # A Ray Train function's checkpoint may hold folders.
                os.makedirs(os.path.dirname(os.path.join(tmp, name)), exist_ok=True)
                with open(os.path.join(tmp, name), "wb") as fh:
                    fh.write(data)
            with open(os.path.join(tmp, MANIFEST_NAME), "wb") as fh:
                fh.write(manifest.to_json().encode())
            current = os.path.join(self.root, CURRENT)
            old = current + f".old-{uuid.uuid4().hex[:8]}"
            if os.path.isdir(current):
                os.rename(current, old)
            os.rename(tmp, current)
            shutil.rmtree(old, ignore_errors=True)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def load(self, manifest: Manifest, names: list[str]) -> dict[str, bytes] | None:
        """The named files of ``manifest`` from the copy, each verified; None if it is not that checkpoint."""
        current = os.path.join(self.root, CURRENT)
        try:
            with open(os.path.join(current, MANIFEST_NAME), "rb") as fh:
                held = Manifest.from_json(fh.read())
        except (OSError, ValueError):
            return None
        if (held.run_id, held.step, held.attempt, held.files) != (
            manifest.run_id,
            manifest.step,
            manifest.attempt,
            manifest.files,
        ):
            return None
        out = {}
        for name in names:
            entry = manifest.entry(name)
            try:
                with open(os.path.join(current, name), "rb") as fh:
                    data = fh.read()
            except OSError:
                return None
            if len(data) != entry.size or sha256_hex(data) != entry.sha256:
                return None
            out[name] = data
        return out


class ScratchKeeper:
    """Keeps each committed checkpoint in a LocalCopy; a full disk is journaled once per
    episode (``scratch_full``, then ``scratch_recovered``): it stays full a while."""

    def __init__(self, copy: LocalCopy, on_event: Callable[[str, dict[str, Any]], None]) -> None:
        self.copy = copy
        self.on_event = on_event
        self.full = False

    def keep(self, manifest: Manifest, files: dict[str, bytes]) -> None:
        try:
            self.copy.keep(manifest, files)
        except OSError as exc:
            if not self.full:
                self.on_event("scratch_full", {"step": manifest.step, "path": self.copy.root, "error": str(exc)[:300]})
            self.full = True
            return
        if self.full:
            self.on_event("scratch_recovered", {"step": manifest.step, "path": self.copy.root})
        self.full = False
