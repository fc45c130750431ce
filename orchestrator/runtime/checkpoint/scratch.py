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
from typing import Any

from recovery.fsio import read_regular
from recovery.manifest import MANIFEST_NAME, Manifest
from recovery.store import sha256_hex

CURRENT = "current"


def write_files(files: Mapping[str, bytes], root: str) -> None:
    """``files`` into the folder ``root``, a name's "/" a subfolder (a Ray Train
    function's checkpoint may hold folders)."""
    for name, data in files.items():
        path = os.path.join(root, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)


def replace_folder(target: str, files: Mapping[str, bytes]) -> None:
    """The folder ``target`` replaced whole by one holding ``files``, built beside it and
    renamed into place; OSError (ENOSPC...) leaves the old one (or none), never a part."""
    parent = os.path.dirname(target)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    tmp = os.path.join(parent, f".incoming-{uuid.uuid4().hex[:8]}")
    try:
        os.makedirs(tmp, mode=0o700)
        write_files(files, tmp)
        old = f"{target}.old-{uuid.uuid4().hex[:8]}"
        if os.path.isdir(target):
            os.rename(target, old)
        os.rename(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class LocalCopy:
    def __init__(self, root: str) -> None:
        self.root = root

    def keep(self, manifest: Manifest, files: dict[str, bytes]) -> None:
        """Replace the copy with this checkpoint; OSError (ENOSPC...) leaves no partial copy."""
        # MANIFEST.json is no member's name (recovery.manifest.check_member_name).
        replace_folder(os.path.join(self.root, CURRENT), {**files, MANIFEST_NAME: manifest.to_json().encode()})

    def holds(self, manifest: Manifest) -> bool:
        """Whether the copy is ``manifest``'s checkpoint (its files not read: ``load``
        verifies each)."""
        try:
            with open(os.path.join(self.root, CURRENT, MANIFEST_NAME), "rb") as fh:
                held = Manifest.from_json(fh.read())
        except (OSError, ValueError):
            return False
        return (held.run_id, held.step, held.attempt, held.files) == (
            manifest.run_id,
            manifest.step,
            manifest.attempt,
            manifest.files,
        )

    def load(self, manifest: Manifest, names: list[str]) -> dict[str, bytes] | None:
        """The named files of ``manifest`` from the copy, each verified; None if it is not that checkpoint."""
        if not self.holds(manifest):
            return None
        current = os.path.join(self.root, CURRENT)
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
    """Keeps a copy on the scratch disk (a LocalCopy's, a RankCopy's at ``path``); a full
    disk is journaled once per episode (``scratch_full``, then ``scratch_recovered``): it
    stays full a while, and costs the copy, never the checkpoint."""

    def __init__(self, path: str, on_event: Callable[[str, dict[str, Any]], None]) -> None:
        self.path = path
        self.on_event = on_event
        self.full = False

    def keep(self, step: int, write: Callable[[], None]) -> None:
        """``write`` the copy of ``step``'s checkpoint; an OSError of it is journaled, not raised."""
        try:
            write()
        except OSError as exc:
            if not self.full:
                self.on_event("scratch_full", {"step": step, "path": self.path, "error": str(exc)[:300]})
            self.full = True
            return
        if self.full:
            self.on_event("scratch_recovered", {"step": step, "path": self.path})
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
        replace_folder(self.mine, files)

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
