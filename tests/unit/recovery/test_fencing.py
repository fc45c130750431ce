"""The lineage rule that keeps a zombie's checkpoints from winning, driven step by step."""

from __future__ import annotations

from pathlib import Path

import pytest

from recovery.fencing import FencedError, Lineage
from recovery.replication import sync_newest
from recovery.store import CheckpointStore, newest_fence, read_fence
from tests.support.stores import TEST_KEY

RUN = "fence-run"


def _ckpt(store: CheckpointStore, step: int, attempt: int) -> None:
    store.commit(RUN, step, attempt, [store.put(RUN, step, "model.pt", f"{step}/{attempt}".encode())])


def test_a_checkpoint_counts_up_to_the_step_the_next_generation_restarted_from() -> None:
    lineage = Lineage().then(1, 0).then(2, 50).then(3, 120)
    assert lineage.allows(1, 50)
    assert not lineage.allows(1, 60)  # written by attempt 1 after attempt 2 took over at 50
    assert lineage.allows(2, 120) and not lineage.allows(2, 150)
    assert lineage.allows(3, 10_000)  # the current generation
    assert "attempt 2" in lineage.why_not(1, 60) and "step 50" in lineage.why_not(1, 60)


def test_lineage_round_trips_through_json() -> None:
    lineage = Lineage().then(1, 0).then(4, 300)
    assert Lineage.from_json(lineage.to_json()) == lineage
    assert lineage.generation == 4


def test_restore_skips_a_zombie_checkpoint_even_when_it_is_the_newest(tmp_path: Path) -> None:
    store = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    _ckpt(store, 50, attempt=1)
    _ckpt(store, 100, attempt=1)  # the zombie, after attempt 2 restarted from 50
    _ckpt(store, 80, attempt=2)
    lineage = Lineage().then(1, 0).then(2, 50)
    skipped: list[tuple[int, str]] = []
    m = store.latest_verified(RUN, on_skip=lambda s, r: skipped.append((s, r)), lineage=lineage)
    assert m is not None and (m.step, m.attempt) == (80, 2)
    assert skipped and skipped[0][0] == 100 and skipped[0][1].startswith("fenced")
    best = sync_newest(RUN, [store], on_skip=lambda *a: None, lineage=lineage)
    assert best is not None and best[1].step == 80


def test_an_old_attempt_cannot_commit_once_fenced(tmp_path: Path) -> None:
    store = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    store.write_fence(RUN, Lineage().then(1, 0).then(2, 50))
    entry = store.put(RUN, 100, "model.pt", b"zombie")
    with pytest.raises(FencedError):
        store.commit(RUN, 100, 1, [entry], fenced=True)
    assert store.committed_steps(RUN) == []
    store.commit(RUN, 100, 2, [entry], fenced=True)  # the current generation may
    assert store.committed_steps(RUN) == [100]


def test_the_newest_fence_wins_and_unreachable_or_missing_fences_are_passed_over(tmp_path: Path) -> None:
    a = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    b = CheckpointStore(f"file://{tmp_path}/b", region="b", key=TEST_KEY)
    c = CheckpointStore(f"file://{tmp_path}/c", region="c", key=TEST_KEY)
    a.write_fence(RUN, Lineage().then(1, 0))
    b.write_fence(RUN, Lineage().then(1, 0).then(2, 40))
    assert read_fence(c, RUN) is None
    assert newest_fence([a, c, b], RUN).generation == 2
