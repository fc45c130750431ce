"""The plan of a shared upload: which rank puts which file, how long rank 0 waits for
the other ranks' shares, and what it reports of them (pure).

Shared uploads (more than one worker; DDP ranks hold the same state): rank 0 still
serializes and hashes every file and signs the manifest with the hashes of its own
bytes, but the files ``assign_shares`` gives to rank r > 0 (its share) are put by rank r
(``share_upload``), and only when rank r's bytes have rank 0's sha256 (the ranks
exchange digests at the snapshot). Before committing, rank 0 checks each such file in
the store against its own bytes and, after a bounded wait (``share_wait_s``), puts any
that is missing or differs itself (``rank0_upload``). So a rank that is late, dead or
wrong costs time, never a bad checkpoint; and since rank r only ever writes rank 0's
bytes, its write landing after rank 0's own changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from orchestrator.runtime.checkpoint.puts import UPLOAD_THREADS
from recovery.store import sha256_hex

# How long rank 0 waits for the other ranks' shares once its own is in: at least this
# long, or twice what its own share took, scaled to the largest other share.
SHARE_WAIT_MIN_S = 2.0
SHARE_WAIT_FACTOR = 2.0


@dataclass(frozen=True)
class ShareReport:
    """How a shared upload went: bytes each rank put (rank 0's takeovers its own),
    the files rank 0 put for another rank, its own share's time and the wait after."""

    delivered: dict[int, int]
    taken: list[str]
    own_s: float
    waited_s: float


def assign_shares(sizes: Mapping[str, int], world: int) -> dict[str, int]:
    """Which rank puts each file: the largest first, each to the rank with the fewest
    bytes so far (ties: the lowest rank), so rank 0 always has the largest file and
    every rank about 1/world of the bytes. Ties in size go by name: every rank that
    computes it gets the same answer."""
    load = [0] * max(1, world)
    out: dict[str, int] = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        rank = min(range(len(load)), key=lambda r: (load[r], r))
        out[name] = rank
        load[rank] += sizes[name]
    return out


def sha256_all(files: Mapping[str, bytes], names: Iterable[str]) -> dict[str, str]:
    """The sha256 of each named file, several at once (hashlib lets go of the GIL)."""
    names = list(names)
    if len(names) <= 1:
        return {n: sha256_hex(files[n]) for n in names}
    with ThreadPoolExecutor(max_workers=min(UPLOAD_THREADS, len(names))) as pool:
        return dict(zip(names, pool.map(lambda n: sha256_hex(files[n]), names), strict=True))


def share_wait_s(own_s: float, own_bytes: int, other_bytes: int) -> float:
    """How long rank 0 waits for the other ranks' files once its own share is in: they
    started when it did, so twice its own time, scaled to the largest other share (at
    most 2x: under ``assign_shares`` no rank gets more than twice rank 0's bytes, since
    rank 0 has the largest file and a rank gets a file only while it has the least)."""
    scale = other_bytes / own_bytes if own_bytes > 0 else 1.0
    return max(SHARE_WAIT_MIN_S, SHARE_WAIT_FACTOR * own_s * min(2.0, max(1.0, scale)))


# The slowest put rate rank 0 assumes of another rank whose files only it holds (a
# sharded checkpoint): its wait grows with that rank's bytes even when its own are few.
REMOTE_FLOOR_BYTES_PER_S = 20 * 2**20


def remote_wait_s(own_s: float, own_bytes: int, rank_bytes: int) -> float:
    """How long rank 0 waits for the files only other ranks hold, once its own are in
    (``rank_bytes``: the most any one rank puts): twice its own time, or twice what that
    rank's bytes take at rank 0's own rate, but never assuming a rate below
    ``REMOTE_FLOOR_BYTES_PER_S``. Unlike ``share_wait_s``, nothing bounds another rank's
    bytes against rank 0's (a train function's rank 0 may write only an index), and rank
    0 cannot put them itself."""
    rate = own_bytes / own_s if own_s > 0 else float("inf")
    return max(
        SHARE_WAIT_MIN_S,
        SHARE_WAIT_FACTOR * own_s,
        SHARE_WAIT_FACTOR * rank_bytes / max(rate, REMOTE_FLOOR_BYTES_PER_S),
    )


def bytes_by_rank(files: Mapping[str, bytes], shares: Mapping[str, int]) -> dict[int, int]:
    """The bytes each other rank was given to put."""
    out: dict[int, int] = {}
    for name, rank in shares.items():
        out[rank] = out.get(rank, 0) + len(files[name])
    return out


def delivered_by_rank(
    files: Mapping[str, bytes], shares: Mapping[str, int], landed: Iterable[str], taken: Iterable[str]
) -> dict[int, int]:
    """The bytes each rank put in the end: rank 0 its own and every share it took over."""
    own = sum(len(files[n]) for n in files if n not in shares)
    out = {0: own + sum(len(files[n]) for n in taken)}
    for name in landed:
        out[shares[name]] = out.get(shares[name], 0) + len(files[name])
    return out


def share_event(step: int, report: ShareReport, first: bool) -> dict[str, Any] | None:
    """The ``upload_shared`` event's fields: when a rank's share had to be put by rank 0
    (late, dead or other bytes), and for the attempt's first shared upload; else None
    (not one per checkpoint)."""
    if not (report.taken or first):
        return None
    return {
        "step": step,
        "bytes_by_rank": {str(r): n for r, n in sorted(report.delivered.items())},
        "taken_over": report.taken[:20],
        "own_s": report.own_s,
        "waited_s": report.waited_s,
    }
