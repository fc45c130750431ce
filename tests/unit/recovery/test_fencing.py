"""The lineage rule that keeps a zombie's checkpoints from winning, driven step by step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recovery.fencing import FencedError, FenceRejected, Lineage, decode_fence, encode_fence
from recovery.keys import controller_keys
from recovery.replication import sync_newest
from recovery.store import CheckpointStore, newest_fence, read_fence
from tests.support.stores import TEST_KEY

RUN = "fence-run"


def _ckpt(store: CheckpointStore, step: int, attempt: int) -> None:
    store.commit(RUN, step, attempt, [store.put(RUN, step, "model.pt", f"{step}/{attempt}".encode(), attempt)])


def test_a_checkpoint_counts_up_to_the_step_the_next_generation_restarted_from() -> None:
    lineage = Lineage().then(1, 0).then(2, 50).then(3, 120)
    assert lineage.allows(1, 50)
    assert not lineage.allows(1, 60)  # written by attempt 1 after attempt 2 took over at 50
    assert lineage.allows(2, 120) and not lineage.allows(2, 150)
    assert lineage.allows(3, 10_000)  # the current generation
    assert "attempt 2" in lineage.why_not(1, 60) and "step 50" in lineage.why_not(1, 60)


def test_lineage_round_trips_through_plain_lists() -> None:
    lineage = Lineage().then(1, 0).then(4, 300)
    assert Lineage.from_plain(lineage.to_plain()) == lineage
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


def test_a_generations_link_moved_forward_replaces_it_and_its_fence_wins_over_the_first() -> None:
    first = Lineage().then(1, 0).then(2, 40)
    moved = first.then(2, 50)  # a commit of attempt 1 found after the fence: the handover moves to it
    assert moved.to_plain() == [[1, 0], [2, 50]] and Lineage.from_plain(moved.to_plain()) == moved
    assert moved.allows(1, 50) and not first.allows(1, 50) and not moved.allows(1, 60)
    assert moved.newer_than(first) and not first.newer_than(moved) and not moved.newer_than(moved)
    assert Lineage().then(1, 0).then(3, 0).newer_than(moved)  # a higher generation, whatever its step
    assert first.newer_than(Lineage()) and not Lineage().newer_than(Lineage())


def test_of_two_fences_of_one_generation_the_later_step_is_the_newest(tmp_path: Path) -> None:
    a = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    b = CheckpointStore(f"file://{tmp_path}/b", region="b", key=TEST_KEY)
    a.write_fence(RUN, Lineage().then(1, 0).then(2, 40))  # its second write did not reach a
    b.write_fence(RUN, Lineage().then(1, 0).then(2, 50))
    assert newest_fence([a, b], RUN).to_plain() == [[1, 0], [2, 50]]
    assert newest_fence([b, a], RUN).to_plain() == [[1, 0], [2, 50]]


CTL = controller_keys(bytes(32), "run")
ATTEMPT = CTL.for_attempt(2)
LINEAGE = Lineage().then(1, 0).then(2, 40)


def test_a_signed_fence_reads_back() -> None:
    assert decode_fence(encode_fence("run", LINEAGE, CTL.sign_fence), "run", ATTEMPT.fence_verifies) == LINEAGE


def _forged(**changes: object) -> bytes:
    d = json.loads(encode_fence("run", LINEAGE, CTL.sign_fence))
    d.update(changes)
    return json.dumps(d).encode()


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (_forged(links=[[1, 0], [2, 40], [99, 0]]), "does not verify"),
        (_forged(signature=""), "unsigned"),
        (json.dumps({"links": [[9, 0]]}).encode(), "unsigned"),
        (_forged(run_id="other"), "another run"),
        (encode_fence("run", LINEAGE, controller_keys(bytes(range(32)), "run").sign_fence), "does not verify"),
        (b"[" * 100_000, "malformed"),
        (b'{"links": [[1e999, 0]]}', "malformed"),
        (b'{"links": [[2, 0], [1, 0]]}', "malformed"),
        (b"\x00\x01", "malformed"),
    ],
)
def test_a_fence_this_controller_did_not_sign_is_rejected_with_its_reason(raw: bytes, why: str) -> None:
    with pytest.raises(FenceRejected, match=why):
        decode_fence(raw, "run", ATTEMPT.fence_verifies)
