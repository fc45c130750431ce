"""Replication between real stores: copy-then-commit, a corrupt source is never copied, the Replicator."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from recovery.manifest import Manifest
from recovery.replication import Replicated, ReplicationError, Replicator, named_parts, replicate, sync_newest
from recovery.store import CheckpointStore, part_of
from tests.support.stores import TEST_KEY

RUN = "run-1"
WriteCheckpoint = Callable[..., Manifest]
FlipByte = Callable[[CheckpointStore, str, int, str], None]


@pytest.fixture
def src(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(f"file://{tmp_path}/store-a", region="local-a", key=TEST_KEY)


@pytest.fixture(params=["file", "memory"])
def dst(request: pytest.FixtureRequest, tmp_path: Path, memory_url: str) -> CheckpointStore:
    url = f"file://{tmp_path}/store-b" if request.param == "file" else memory_url
    return CheckpointStore(url, region="local-b", key=TEST_KEY)


def test_replicate_copies_a_checkpoint_that_verifies_and_records_its_source(
    src: CheckpointStore, dst: CheckpointStore, write_checkpoint: WriteCheckpoint
) -> None:
    m = write_checkpoint(src, RUN, 40, extra={"world_size": 2})
    r = replicate(src, dst, m)
    assert r is not None
    assert (r.step, r.source, r.target) == (40, "local-a", "local-b")
    assert r.bytes == sum(f.size for f in m.files)
    assert dst.verify(RUN, 40).ok
    copy = dst.manifest(RUN, 40)
    assert copy is not None
    assert copy.files == m.files
    assert (copy.region, copy.attempt) == ("local-b", m.attempt)
    assert copy.extra == {"world_size": 2, "replica_of": "local-a"}
    for f in m.files:
        assert dst.read(copy, f.name) == src.read(m, f.name)


def test_replicating_a_step_the_target_already_holds_returns_none(
    src: CheckpointStore, dst: CheckpointStore, write_checkpoint: WriteCheckpoint
) -> None:
    m = write_checkpoint(src, RUN, 40)
    assert replicate(src, dst, m) is not None
    assert replicate(src, dst, m) is None


def test_a_replica_that_no_longer_verifies_is_copied_again(
    src: CheckpointStore, dst: CheckpointStore, write_checkpoint: WriteCheckpoint, flip_byte: FlipByte
) -> None:
    m = write_checkpoint(src, RUN, 40)
    replicate(src, dst, m)
    flip_byte(dst, RUN, 40, "model.pt")
    assert replicate(src, dst, m) is not None
    assert dst.verify(RUN, 40).ok


def test_corrupt_source_raises_and_leaves_the_target_without_a_manifest(
    src: CheckpointStore, dst: CheckpointStore, write_checkpoint: WriteCheckpoint, flip_byte: FlipByte
) -> None:
    m = write_checkpoint(src, RUN, 40)
    flip_byte(src, RUN, 40, "state.pt")  # the last file copied: the others are already there
    with pytest.raises(ReplicationError, match="does not verify"):
        replicate(src, dst, m)
    assert dst.manifest(RUN, 40) is None
    assert dst.committed_steps(RUN) == []


def test_sync_newest_picks_the_newest_checkpoint_that_verifies_in_any_store_and_reports_skips(
    tmp_path: Path, write_checkpoint: WriteCheckpoint, flip_byte: FlipByte
) -> None:
    a, b, c = (CheckpointStore(f"file://{tmp_path}/{n}", region=n, key=TEST_KEY) for n in "abc")
    for step in (20, 40, 60):
        write_checkpoint(a, RUN, step)
    flip_byte(a, RUN, 60, "model.pt")
    for step in (40, 50):
        write_checkpoint(b, RUN, step)
    skipped: list[tuple[str, int]] = []
    best = sync_newest(RUN, [a, b, c], on_skip=lambda st, step, reason: skipped.append((st.region, step)))
    assert best is not None
    assert (best[0].region, best[1].step) == ("b", 50)
    assert skipped == [("a", 60)]


def test_sync_newest_prefers_the_first_store_on_a_tie(tmp_path: Path, write_checkpoint: WriteCheckpoint) -> None:
    a, b = (CheckpointStore(f"file://{tmp_path}/{n}", region=n, key=TEST_KEY) for n in "ab")
    write_checkpoint(a, RUN, 40)
    write_checkpoint(b, RUN, 40)
    for order, first in (([a, b], "a"), ([b, a], "b")):
        best = sync_newest(RUN, order, on_skip=lambda *_: None)
        assert best is not None
        assert best[0].region == first


def test_sync_newest_with_no_checkpoint_anywhere_is_none(tmp_path: Path) -> None:
    stores = [CheckpointStore(f"file://{tmp_path}/{n}", region=n, key=TEST_KEY) for n in "ab"]
    assert sync_newest(RUN, stores, on_skip=lambda *_: None) is None


def test_replicator_tick_copies_the_newest_commit_reports_lag_and_applies_retention_on_the_target(
    src: CheckpointStore, dst: CheckpointStore, write_checkpoint: WriteCheckpoint
) -> None:
    committed_at = time.time() - 5.0
    for step in (20, 40, 60):
        write_checkpoint(src, RUN, step, committed_at=committed_at)
    write_checkpoint(dst, RUN, 10)  # an old checkpoint already in the target
    seen: list[Replicated] = []
    errors: list[str] = []
    rep = Replicator(RUN, keep_last=2, on_replicated=seen.append, on_error=errors.append)
    rep.follow(src, [src, dst])
    done = rep.tick()
    # Only the newest: 40 is superseded by 60 and not worth the copy.
    assert [r.step for r in done] == [60]
    assert seen == done
    assert all(r.lag_s >= 5.0 and (r.source, r.target) == ("local-a", "local-b") for r in seen)
    assert dst.committed_steps(RUN) == [10, 60]
    assert dst.verify(RUN, 60).ok
    assert rep.tick() == []  # nothing new: nothing copied
    # The primary is not its own target: nothing of it was retained away.
    assert src.committed_steps(RUN) == [20, 40, 60]
    assert errors == []
    assert rep.tick() == []


def test_replicator_reports_a_corrupt_source_once_and_still_copies_the_rest(
    src: CheckpointStore, dst: CheckpointStore, write_checkpoint: WriteCheckpoint, flip_byte: FlipByte
) -> None:
    for step in (20, 40):
        write_checkpoint(src, RUN, step)
    flip_byte(src, RUN, 40, "model.pt")
    errors: list[str] = []
    rep = Replicator(RUN, keep_last=3, on_replicated=lambda r: None, on_error=errors.append)
    rep.follow(src, [dst])
    assert [r.step for r in rep.tick()] == [20]
    assert rep.tick() == []
    assert len(errors) == 1
    assert "step 40" in errors[0]
    assert dst.committed_steps(RUN) == [20]


def test_replicator_without_a_primary_does_nothing() -> None:
    rep = Replicator(RUN, keep_last=2, on_replicated=lambda r: None, on_error=lambda m: None)
    assert rep.tick() == []


def test_a_checkpoint_that_names_its_parts_checkpoints_is_copied_after_them(
    src: CheckpointStore, dst: CheckpointStore, write_checkpoint: WriteCheckpoint
) -> None:
    part = part_of(RUN, "trial_00002")
    p = write_checkpoint(src, part, 3, attempt=2)
    named = {"trial_00002": {"iteration": 3, "attempt": 2, "digest": "ab" * 32}}
    m = write_checkpoint(src, RUN, 7, attempt=2, extra={"checkpoints": named})
    assert replicate(src, dst, m) is not None
    assert dst.verify(RUN, 7).ok and dst.load(part, 3, generation=2)[1].ok
    held = dst.manifest(part, 3)
    assert held is not None and held.files == p.files
    # A part it names that the source does not hold: the checkpoint is not copied without it.
    gone = write_checkpoint(src, RUN, 8, attempt=2, extra={"checkpoints": {"trial_00004": named["trial_00002"]}})
    with pytest.raises(ReplicationError, match="a part it names is not there"):
        replicate(src, dst, gone)
    assert dst.manifest(RUN, 8) is None


@pytest.mark.parametrize(
    "named",
    [
        ["trial_00002"],
        {"../other-run": {"iteration": 3, "attempt": 2}},
        {"trial_00002": {"iteration": "3", "attempt": 2}},
        {"trial_00002": {"iteration": 3, "attempt": True}},
    ],
)
def test_parts_named_in_a_shape_a_snapshot_never_writes_are_refused(named: object) -> None:
    m = Manifest(run_id=RUN, step=7, attempt=2, files=(), committed_at=0.0, extra={"checkpoints": named})
    with pytest.raises(ReplicationError, match="checkpoints"):
        named_parts(m)
