"""Generation-scoped checkpoint folders: a fenced zombie's late writes of a step never touch
a newer generation's checkpoint of that step; old step-only folders are still read."""

from __future__ import annotations

from pathlib import Path

import pytest

from recovery.fencing import FencedError, Lineage
from recovery.manifest import MANIFEST_NAME
from recovery.store import CheckpointStore, parse_step_dir, parse_step_folder, pick_folder, step_dir_name
from tests.support.stores import TEST_KEY

pytestmark = pytest.mark.unit

RUN = "gen-run"
LINEAGE = Lineage().then(1, 0).then(2, 50)  # generation 2 restarted from step 50


def _store(tmp_path: Path, generation: int) -> CheckpointStore:
    return CheckpointStore(f"file://{tmp_path}/s", region="a", key=TEST_KEY.for_attempt(generation))


def test_folder_names_carry_the_generation_and_old_names_still_parse() -> None:
    assert step_dir_name(60, 2) == "step-60-g2" and step_dir_name(60) == "step-60"
    assert parse_step_folder("x/checkpoints/step-60-g2/") == (60, 2)
    assert parse_step_folder("step-60") == (60, None)
    assert parse_step_dir("step-60-g2") == parse_step_dir("step-60") == 60
    for junk in ("step-", "step-6x", "step-60-g", "step-60-gx", "step-60-2", "other-60", "step--g1"):
        assert parse_step_folder(junk) is None, junk


def test_a_restore_takes_the_newest_step_then_the_highest_generation_an_old_folder_lowest() -> None:
    assert pick_folder([(40, 3), (60, 1), (60, 2)]) == (60, 2)
    assert pick_folder([(60, None), (60, 1)]) == (60, 1)
    assert pick_folder([(60, None), (40, 5)]) == (60, None)
    assert pick_folder([]) is None


def test_a_fenced_generations_late_put_of_the_same_step_leaves_the_newer_checkpoint_intact(tmp_path: Path) -> None:
    old, new = _store(tmp_path, 1), _store(tmp_path, 2)
    CheckpointStore(f"file://{tmp_path}/s", key=TEST_KEY).write_fence(RUN, LINEAGE)
    ours = new.commit(RUN, 60, 2, [new.put(RUN, 60, "model.pt", b"generation 2")], fenced=True)

    # The zombie (generation 1) still believes step 60 is its to write: its late put lands,
    # its fenced commit is refused, and one that raced past the fence commits in its own folder.
    old.put(RUN, 60, "model.pt", b"zombie bytes")
    with pytest.raises(FencedError):
        old.commit(RUN, 60, 1, [old.put(RUN, 60, "model.pt", b"zombie bytes")], fenced=True)
    old.commit(RUN, 60, 1, [old.put(RUN, 60, "model.pt", b"zombie bytes")])

    assert sorted(p.name for p in (tmp_path / "s" / RUN / "checkpoints").iterdir()) == ["step-60-g1", "step-60-g2"]
    m = new.latest_verified(RUN, lineage=LINEAGE)
    assert m is not None and (m.step, m.attempt) == (60, 2) and m.signature == ours.signature
    assert new.read(m, "model.pt") == b"generation 2"
    assert new.checkpoint_url(RUN, 60).endswith("/checkpoints/step-60-g2")
    # Retention drops the zombie's folder (fenced) and keeps the lineage's own of the same step.
    assert new.retain(RUN, keep=3, lineage=LINEAGE, attempt=2) == [60]
    assert [p.name for p in (tmp_path / "s" / RUN / "checkpoints").iterdir()] == ["step-60-g2"]
    assert new.verify(RUN, 60).ok


def test_a_step_folder_written_by_an_older_version_is_still_restored_below_any_generation(tmp_path: Path) -> None:
    store = _store(tmp_path, 1)
    store.commit(RUN, 40, 1, [store.put(RUN, 40, "model.pt", b"old layout", 1)])
    root = tmp_path / "s" / RUN / "checkpoints"
    (root / "step-40-g1").rename(root / "step-40")  # as an earlier version laid it out
    m = store.latest_verified(RUN)
    assert m is not None and m.step == 40 and store.read(m, "model.pt") == b"old layout"
    assert store.checkpoint_url(RUN, 40).endswith("/checkpoints/step-40")

    store.commit(RUN, 40, 1, [store.put(RUN, 40, "model.pt", b"new layout", 1)])
    m = store.latest_verified(RUN)
    assert m is not None and store.read(m, "model.pt") == b"new layout"


def test_a_manifest_moved_into_another_generations_folder_is_skipped_with_its_reason(tmp_path: Path) -> None:
    old, new = _store(tmp_path, 1), _store(tmp_path, 2)
    old.commit(RUN, 40, 1, [old.put(RUN, 40, "model.pt", b"first")])
    old.commit(RUN, 60, 1, [old.put(RUN, 60, "model.pt", b"zombie")])
    root = tmp_path / "s" / RUN / "checkpoints"
    (root / "step-60-g1").rename(root / "step-60-g2")  # relabelled as the newer generation's
    assert (root / "step-60-g2" / MANIFEST_NAME).exists()
    skipped: list[tuple[int, str]] = []
    m = new.latest_verified(RUN, on_skip=lambda s, r: skipped.append((s, r)))
    assert m is not None and m.step == 40
    assert skipped == [(60, "written by generation 1, in the folder of generation 2")]
