"""What a rank hands over: a share counts only for a file it holds, given to another rank, with a digest."""

from __future__ import annotations

import pytest

from orchestrator.runtime.checkpoint.snapshot import Snapshot, snapshot_of

pytestmark = pytest.mark.unit
FILES = {"model.pt": b"m", "optimizer.pt": b"o", "state.pt": b"s"}


def test_without_shares_every_file_is_this_ranks() -> None:
    snap = snapshot_of(20, FILES, {"world_size": 1})
    assert snap == Snapshot(20, FILES, {"world_size": 1}, {}, {})


def test_only_shares_of_held_files_given_to_another_rank_with_a_digest_count() -> None:
    shares = {"model.pt": 1, "optimizer.pt": 0, "state.pt": 2, "absent.pt": 1}
    digests = {"model.pt": "d-model", "optimizer.pt": "d-opt", "absent.pt": "d-absent"}
    snap = snapshot_of(20, FILES, {}, shares, digests)
    # optimizer.pt: rank 0's own; state.pt: no digest; absent.pt: not held.
    assert snap.shares == {"model.pt": 1}
    # A held file's digest is kept, shared or not (its put need not hash it again).
    assert snap.digests == {"model.pt": "d-model", "optimizer.pt": "d-opt"}


def test_alone_keeps_the_checkpoint_and_drops_the_shares() -> None:
    snap = snapshot_of(40, FILES, {"k": 1}, {"model.pt": 1}, {"model.pt": "d"})
    alone = snap.alone()
    assert (alone.step, alone.files, alone.extra) == (40, FILES, {"k": 1})
    assert (alone.shares, alone.digests) == ({}, {"model.pt": "d"})
    assert snap.shares == {"model.pt": 1}  # the original is unchanged


def test_remote_files_are_other_ranks_files_this_rank_does_not_hold_and_stay_remote_alone() -> None:
    remote = {"shard-r1.pt": (1, 10, "d1"), "shard-r0.pt": (0, 5, "d0"), "model.pt": (2, 1, "dm")}
    snap = snapshot_of(8, FILES, {}, remote=remote)
    # shard-r0.pt: rank 0's own; model.pt: held here.
    assert snap.remote == {"shard-r1.pt": (1, 10, "d1")}
    assert snap.alone().remote == snap.remote
