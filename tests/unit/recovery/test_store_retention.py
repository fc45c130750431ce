"""Retention and replication meet foreign entries in a store (malformed manifests, special
files, unsigned ones): they leave each alone, never count it, and say so once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runtime.checkpoint.commit import Committer
from recovery.fencing import Lineage
from recovery.manifest import MANIFEST_NAME
from recovery.replication import Replicator
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY, WriteCheckpoint

pytestmark = pytest.mark.unit
RUN = "retained"

NESTED = b'{"a":' * 5000 + b"1" + b"}" * 5000
HUGE_NUMBER = b'{"run_id": "retained", "step": 1e999}'


def _store(tmp_path: Path, region: str = "a") -> CheckpointStore:
    return CheckpointStore(f"file://{tmp_path}/{region}", region=region, key=TEST_KEY)


def _plant_foreign(store: CheckpointStore, tmp_path: Path, region: str = "a") -> dict[int, str]:
    """Above the run's own steps: a deeply nested manifest, one with 1e999, a MANIFEST.json
    FIFO and one that is a symlink loop. What each is, by step."""
    root = tmp_path / region / RUN / "checkpoints"
    planted = {600: "nested", 700: "1e999", 800: "fifo", 900: "loop"}
    for step, kind in planted.items():
        folder = root / f"step-{step}"
        folder.mkdir(parents=True)
        (folder / "model.pt").write_bytes(b"x")
        manifest = folder / MANIFEST_NAME
        if kind == "nested":
            manifest.write_bytes(NESTED)
        elif kind == "1e999":
            manifest.write_bytes(HUGE_NUMBER)
        elif kind == "fifo":
            os.mkfifo(manifest)
        else:
            manifest.symlink_to(manifest)
    return planted


@pytest.mark.parametrize("lineage", [None, Lineage().then(1, 0)])
def test_retention_leaves_malformed_and_special_manifests_alone_and_says_so_once(
    tmp_path: Path, write_checkpoint: WriteCheckpoint, lineage: Lineage | None
) -> None:
    store = _store(tmp_path)
    for step in (20, 40, 60):
        write_checkpoint(store, RUN, step)
    planted = _plant_foreign(store, tmp_path)
    told: list[tuple[int, str]] = []
    # The planted steps push none of the run's own out, and none is deleted (with a
    # lineage too: a manifest that does not parse is no proof of a fenced attempt).
    assert store.retain(RUN, keep=2, lineage=lineage, on_skip=lambda s, why: told.append((s, why))) == [20]
    assert store.committed_steps(RUN) == [40, 60, *sorted(planted)]
    assert sorted(s for s, _ in told) == sorted(planted)
    assert all(why.startswith("left alone by retention: ") for _, why in told), told
    reasons = dict(told)
    assert "FIFO" in reasons[800] and "symlink" in reasons[900], reasons
    # Said once: the next retention (after the next commit) is silent about them.
    write_checkpoint(store, RUN, 80)
    assert store.retain(RUN, keep=2, lineage=lineage, on_skip=lambda s, why: told.append((s, why))) == [40]
    assert len(told) == len(planted)
    assert store.latest_verified(RUN).step == 80  # type: ignore[union-attr]


def test_a_fenced_manifest_of_the_run_is_still_deleted_first(tmp_path: Path, write_checkpoint: WriteCheckpoint) -> None:
    store = _store(tmp_path)
    for step in (20, 40):
        write_checkpoint(store, RUN, step, attempt=1)
    write_checkpoint(store, RUN, 60, attempt=1)  # the zombie's, past where attempt 2 restarted
    write_checkpoint(store, RUN, 50, attempt=2)
    told: list[int] = []
    lineage = Lineage().then(1, 0).then(2, 40)
    assert store.retain(RUN, keep=2, lineage=lineage, attempt=2, on_skip=lambda s, _w: told.append(s)) == [20, 60]
    assert told == []  # the run's own, fenced: nothing foreign to say


def test_the_committer_journals_what_retention_left_alone(tmp_path: Path, write_checkpoint: WriteCheckpoint) -> None:
    store = _store(tmp_path)
    write_checkpoint(store, RUN, 20)
    planted = _plant_foreign(store, tmp_path)
    events: list[tuple[str, dict[str, Any]]] = []
    committer = Committer(
        [store], RUN, 1, 2, put_files=lambda *a: ([], None), on_event=lambda t, f: events.append((t, f))
    )
    committer.retain(store)
    committer.retain(store)
    skipped = [f for t, f in events if t == "checkpoint_skipped"]
    assert sorted(f["step"] for f in skipped) == sorted(planted)
    assert all(f["region"] == "a" and "left alone" in f["reason"] for f in skipped)
    assert not [t for t, _ in events if t == "retention_failed"]


def test_replication_copies_the_run_s_own_past_foreign_entries_and_reports_them_once(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    a, b = _store(tmp_path, "a"), _store(tmp_path, "b")
    for step in (20, 40):
        write_checkpoint(a, RUN, step)
    _plant_foreign(a, tmp_path, "a")
    planted_b = _plant_foreign(b, tmp_path, "b")
    errors: list[str] = []
    rep = Replicator(
        RUN, keep_last=2, on_replicated=lambda r: None, on_error=errors.append, lineage=lambda: Lineage().then(1, 0)
    )
    rep.follow(a, [a, b])
    assert [r.step for r in rep.tick()] == [40]
    assert b.verify(RUN, 40).ok
    assert b.committed_steps(RUN) == [40, *sorted(planted_b)]  # the target's foreign entries stay
    first = list(errors)
    assert any("left alone by retention" in e for e in first), first
    write_checkpoint(a, RUN, 60)
    assert [r.step for r in rep.tick()] == [60]
    assert errors[len(first) :] == [], errors[len(first) :]


def test_a_replicator_thread_outlives_an_unexpected_error(tmp_path: Path) -> None:
    errors: list[str] = []
    rep = Replicator(RUN, keep_last=2, on_replicated=lambda r: None, on_error=errors.append, interval_s=0.01)

    def boom() -> list[Any]:
        raise RuntimeError("a store's client raised what nobody expected")

    rep.tick = boom  # type: ignore[method-assign]
    rep.start()
    try:
        deadline = 200
        while not errors and deadline:
            rep._stop.wait(0.01)
            deadline -= 1
        assert rep._thread is not None and rep._thread.is_alive()
    finally:
        rep.stop(drain=False)
    assert errors == ["replication: RuntimeError: a store's client raised what nobody expected"]
