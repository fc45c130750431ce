"""CheckpointStore on a real local folder and on fsspec memory: commit, verify, skip, retain, delete."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from recovery.manifest import MANIFEST_NAME, Manifest, ManifestError
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY

RUN = "run-1"
WriteCheckpoint = Callable[..., Manifest]
Torn = Callable[[CheckpointStore, str, int], None]
FlipByte = Callable[[CheckpointStore, str, int, str], None]
FILES = {"model.pt": b"weights " * 50, "optimizer.pt": b"momentum " * 30, "state.pt": b"step=20"}


@pytest.fixture
def store(store_url: str) -> CheckpointStore:
    return CheckpointStore(store_url, region="local-a", key=TEST_KEY)


def skips_of(store: CheckpointStore) -> tuple[int | None, list[tuple[int, str]]]:
    skipped: list[tuple[int, str]] = []
    m = store.latest_verified(RUN, on_skip=lambda step, reason: skipped.append((step, reason)))
    return (None if m is None else m.step), skipped


def test_committed_checkpoint_is_listed_verifies_and_reads_back(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint
) -> None:
    write_checkpoint(store, RUN, 40)
    written = write_checkpoint(store, RUN, 20, files=FILES, extra={"world_size": 1})
    assert store.committed_steps(RUN) == [20, 40]
    assert store.verify(RUN, 20).ok
    m = store.manifest(RUN, 20)
    assert m == written
    assert (m.region, m.extra) == ("local-a", {"world_size": 1})
    assert [f.name for f in m.files] == sorted(FILES)
    for name, data in FILES.items():
        assert store.read(m, name) == data


def test_unknown_run_has_no_checkpoints(store: CheckpointStore) -> None:
    assert store.committed_steps("nobody") == []
    assert store.latest_verified("nobody") is None


def test_folder_without_manifest_is_not_committed_and_latest_verified_ignores_it(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint, write_torn: Torn
) -> None:
    write_checkpoint(store, RUN, 20)
    write_checkpoint(store, RUN, 40)
    write_torn(store, RUN, 60)
    assert store.all_steps(RUN) == {20: True, 40: True, 60: False}
    assert store.committed_steps(RUN) == [20, 40]
    assert not store.verify(RUN, 60).ok
    assert skips_of(store) == (40, [])


def test_corrupt_newest_is_skipped_reported_and_the_previous_step_is_returned(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint, flip_byte: FlipByte
) -> None:
    for step in (20, 40, 60):
        write_checkpoint(store, RUN, step)
    flip_byte(store, RUN, 60, "model.pt")
    step, skipped = skips_of(store)
    assert step == 40
    assert len(skipped) == 1
    assert skipped[0][0] == 60
    assert "model.pt" in skipped[0][1]


def test_truncated_file_is_skipped_with_its_size_in_the_reason(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint
) -> None:
    write_checkpoint(store, RUN, 20)
    write_checkpoint(store, RUN, 40)
    path = f"{store.step_path(RUN, 40)}/optimizer.pt"
    data = store.fs.cat_file(path)
    store.fs.pipe_file(path, data[: len(data) // 2])
    step, skipped = skips_of(store)
    assert step == 20
    assert [s for s, _ in skipped] == [40]
    assert f"{len(data) // 2} bytes" in skipped[0][1]


def test_missing_file_is_skipped(store: CheckpointStore, write_checkpoint: WriteCheckpoint) -> None:
    write_checkpoint(store, RUN, 20)
    write_checkpoint(store, RUN, 40)
    store.fs.rm(f"{store.step_path(RUN, 40)}/state.pt")
    assert skips_of(store) == (20, [(40, "state.pt is missing")])


def test_manifest_copied_into_another_step_folder_does_not_verify(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint
) -> None:
    write_checkpoint(store, RUN, 20)
    write_checkpoint(store, RUN, 40)
    manifest_20 = store.fs.cat_file(f"{store.step_path(RUN, 20)}/{MANIFEST_NAME}")
    store.fs.pipe_file(f"{store.step_path(RUN, 40)}/{MANIFEST_NAME}", manifest_20)
    assert not store.verify(RUN, 40).ok
    assert skips_of(store)[0] == 20


def test_at_most_limits_latest_verified_to_older_steps(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint
) -> None:
    for step in (20, 40, 60):
        write_checkpoint(store, RUN, step)
    m = store.latest_verified(RUN, at_most=59)
    assert m is not None
    assert m.step == 40


def test_reading_a_corrupted_file_raises_manifest_error(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint, flip_byte: FlipByte
) -> None:
    m = write_checkpoint(store, RUN, 20, files=FILES)
    flip_byte(store, RUN, 20, "model.pt")
    with pytest.raises(ManifestError):
        store.read(m, "model.pt")
    assert store.read(m, "state.pt") == FILES["state.pt"]


def test_retain_keeps_the_newest_committed_and_deletes_older_and_old_torn_folders(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint, write_torn: Torn
) -> None:
    for step in (20, 40, 60, 80):
        write_checkpoint(store, RUN, step)
    write_torn(store, RUN, 50)  # died before its commit; 60 and 80 came after it
    write_torn(store, RUN, 100)  # newer than any commit: may still be in flight
    assert store.retain(RUN, keep=2) == [20, 40, 50]
    assert store.all_steps(RUN) == {60: True, 80: True, 100: False}
    assert all(store.verify(RUN, s).ok for s in (60, 80))


def test_retain_without_any_commit_keeps_torn_folders(store: CheckpointStore, write_torn: Torn) -> None:
    write_torn(store, RUN, 20)
    assert store.retain(RUN, keep=2) == []
    assert store.all_steps(RUN) == {20: False}


def test_delete_removes_the_whole_step(store: CheckpointStore, write_checkpoint: WriteCheckpoint) -> None:
    write_checkpoint(store, RUN, 20)
    write_checkpoint(store, RUN, 40)
    store.delete(RUN, 40)
    assert store.all_steps(RUN) == {20: True}


class _Crash(BaseException):  # a process death: no handler may swallow it
    pass


def test_delete_removes_the_manifest_first_so_a_half_deleted_checkpoint_reads_uncommitted(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_checkpoint(store, RUN, 20)
    write_checkpoint(store, RUN, 40)
    real_rm = store.fs.rm

    def rm_dies_on_anything_but_a_manifest(path: str, *args: object, **kwargs: object) -> None:
        if not str(path).endswith(MANIFEST_NAME):
            raise _Crash(path)
        real_rm(path, *args, **kwargs)

    monkeypatch.setattr(store.fs, "rm", rm_dies_on_anything_but_a_manifest)
    with pytest.raises(_Crash):
        store.delete(RUN, 40)
    monkeypatch.undo()
    assert store.all_steps(RUN) == {20: True, 40: False}
    assert store.committed_steps(RUN) == [20]
    assert skips_of(store) == (20, [])


def test_sized_files_are_found_with_their_size_and_never_read(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint, flip_byte: FlipByte, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore's choice reads the files rank 0 keeps and only lists the others: their
    readers verify them as they stream in, so each byte is hashed once."""
    files = {**FILES, "shard-r0.pt": b"zero " * 40, "shard-r1.pt": b"one " * 40}
    write_checkpoint(store, RUN, 20, files=files)
    read: list[str] = []
    cat_file = store.fs.cat_file
    monkeypatch.setattr(store.fs, "cat_file", lambda path, *a, **kw: read.append(path) or cat_file(path, *a, **kw))

    def load() -> tuple[bool, str, dict[str, bytes]]:
        _, verdict, kept = store.load(RUN, 20, keep=lambda n: True, sized=lambda n: n.startswith("shard-"))
        return verdict.ok, verdict.reason, kept

    ok, _, kept = load()
    assert ok and sorted(kept) == sorted(FILES)
    assert not [p for p in read if "shard-" in p]
    # Same size, another byte: its reader finds it; the choice cannot, and does not try.
    flip_byte(store, RUN, 20, "shard-r1.pt")
    read.clear()
    assert load()[0]
    folder = store.manifest_path(store.manifest(RUN, 20))
    store.fs.pipe_file(f"{folder}/shard-r1.pt", b"one " * 39)
    assert load()[:2] == (False, "shard-r1.pt has 156 bytes, manifest says 160")
    store.fs.rm_file(f"{folder}/shard-r1.pt")
    assert load()[:2] == (False, "shard-r1.pt is missing")
    assert not [p for p in read if "shard-" in p]


def test_a_sized_file_that_is_no_regular_file_is_passed_over_with_why(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    store = CheckpointStore(f"file://{tmp_path}/store", key=TEST_KEY)
    files = {**FILES, "shard-r0.pt": b"zero " * 40}
    write_checkpoint(store, RUN, 20, files=files)
    folder = Path(store.manifest_path(store.manifest(RUN, 20)).removeprefix("file://"))
    (folder / "shard-r0.pt").unlink()
    outside = tmp_path / "outside"
    outside.write_bytes(b"zero " * 40)
    (folder / "shard-r0.pt").symlink_to(outside)
    _, verdict, kept = store.load(RUN, 20, keep=lambda n: True, sized=lambda n: n.startswith("shard-"))
    assert (verdict.ok, verdict.reason, kept) == (False, "shard-r0.pt: a link", {})
    (folder / "shard-r0.pt").unlink()
    os.mkfifo(folder / "shard-r0.pt")
    _, verdict, _ = store.load(RUN, 20, keep=lambda n: True, sized=lambda n: n.startswith("shard-"))
    assert (verdict.ok, verdict.reason) == (False, "shard-r0.pt: not a regular file (other)")
