"""What a rank hands to the uploader: one checkpoint's files, already serialised.

The seam between taking a checkpoint and storing it. The training loop turns its
state into named files (bytes) and hands them over as a ``Snapshot``; from there on
the checkpoint package alone decides how the files reach a store and when the
manifest commits them (``commit``). A writer of sharded state hands over its own
shard files the same way; who puts which file is said by ``share_plan``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Snapshot:
    step: int
    files: dict[str, bytes]
    extra: dict[str, object]
    # Files other ranks put: name -> rank, each with its sha256 (of rank 0's bytes) in
    # ``digests``; a file this rank puts may have one there too (then it is not hashed again).
    shares: dict[str, int] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    # Files only another rank holds (a sharded checkpoint): name -> (rank, size, sha256).
    remote: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    # Which store the other ranks were told to put their files of it into (see Committer.commit).
    store_index: int = 0
    # time.monotonic() when it was handed over: a commit's time counts from here.
    taken_at: float = field(default_factory=time.monotonic, compare=False)

    def alone(self) -> Snapshot:
        """The same checkpoint with every file this rank holds its to put (another store
        than the one the other ranks write to); a remote file stays remote."""
        return replace(self, shares={})


def snapshot_of(
    step: int,
    files: dict[str, bytes],
    extra: dict[str, object],
    shares: Mapping[str, int] | None = None,
    digests: Mapping[str, str] | None = None,
    remote: Mapping[str, tuple[int, int, str]] | None = None,
    store_index: int = 0,
) -> Snapshot:
    """The snapshot to upload: a share counts only for a file this rank holds, given to a
    rank other than 0, with a digest (else this rank puts it itself). ``digests``: the
    sha256 of this rank's bytes of its files, where taken already."""
    digests = {n: d for n, d in (digests or {}).items() if n in files}
    shared = {n: r for n, r in (shares or {}).items() if r != 0 and n in digests}
    others = {n: v for n, v in (remote or {}).items() if v[0] != 0 and n not in files}
    return Snapshot(step, files, extra, shared, digests, others, store_index)
