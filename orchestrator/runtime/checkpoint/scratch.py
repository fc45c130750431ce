"""The newest checkpoint, kept on the node's local scratch disk too.

A worker group that Ray Train restarts in place finds it there and skips the
download. The store stays the truth: the copy is used only when its manifest is
the one restore chose and every file verifies. A full disk costs the copy, never
the checkpoint (``ScratchKeeper`` journals ``scratch_full``).

The built-in loop's rank 0 keeps each committed checkpoint whole (``LocalCopy``); a
Ray Train function's ranks each keep the files they put (``RankCopy``), since no
rank holds another's, and a restarted rank takes from its node whatever of the
chosen checkpoint is there, reading only the rest from the store.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from recovery.fsio import read_regular
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


# A Ray Train function's ranks' copies: <node's scratch>/function/rank-<r>/<the files it put>.
FUNCTION_COPIES = "function"


def node_scratch(scratch_dir: str, node: int) -> str:
    """Node ``node``'s scratch folder: the cluster's ``scratch_dir`` on the head (or a node
    of no known index), ``<scratch_dir>/node-<k>`` on worker node k. On a machine whose
    nodes share one disk (the local provider) each node keeps to its own, and a node
    replaced starts with an empty one, as a new machine would."""
    return scratch_dir if node <= 0 else os.path.join(scratch_dir, f"node-{node}")


class RankCopy:
    """The files one rank of a Ray Train function put for its newest checkpoint, on its
    node's scratch disk. Kept whether or not that checkpoint commits: a file is taken
    from here only with the size and sha256 the restored checkpoint's signed manifest
    lists for it, so a copy of another step (or of nothing committed) is read past."""

    def __init__(self, scratch_dir: str, rank: int) -> None:
        self.root = os.path.join(scratch_dir, FUNCTION_COPIES)
        self.mine = os.path.join(self.root, f"rank-{rank}")

    def keep(self, files: Mapping[str, bytes]) -> None:
        """Replace this rank's copy with ``files`` (names checked by the manifest's rule);
        OSError (ENOSPC...) leaves the older copy or none, never a partial one."""
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        tmp = os.path.join(self.root, f".incoming-{uuid.uuid4().hex[:8]}")
        try:
            os.makedirs(tmp, mode=0o700)
            for name, data in files.items():
                path = Path(tmp, *name.split("/"))
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            old = f"{self.mine}.old-{uuid.uuid4().hex[:8]}"
            if os.path.isdir(self.mine):
                os.rename(self.mine, old)
            os.rename(tmp, self.mine)
            shutil.rmtree(old, ignore_errors=True)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def take(self, manifest: Manifest, names: Iterable[str]) -> Iterator[tuple[str, bytes]]:
        """Of ``names``, those a rank's copy on this node holds with ``manifest``'s size and
        sha256 (whichever rank put them: on one node a rank reads its peers' too), one at
        a time; the rest (absent, other bytes, not a regular file) are left to the store."""
        try:
            ranks = sorted(e.name for e in os.scandir(self.root) if e.name.startswith("rank-") and e.is_dir())
        except OSError:
            return
        for name in names:
            entry = manifest.entry(name)
            for rank_dir in ranks:
                folder = os.path.join(self.root, rank_dir)
                path = os.path.join(folder, *name.split("/"))
                try:
                    data = read_regular(path, folder, 0, entry.size + 1)  # never a link, a FIFO
                except OSError:
                    continue
                if len(data) == entry.size and sha256_hex(data) == entry.sha256:
                    yield name, data
                    break
