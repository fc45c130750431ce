"""The run's mirror in the control store: written as the run's files change, read back
whole and only when it verifies; what a store writer plants is passed over, never used."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from orchestrator.control.mirror import (
    MAX_SEGMENTS,
    MirrorError,
    StateMirror,
    controllers,
    mirrored_bytes,
    read_mirror,
    segments_for,
)

pytestmark = pytest.mark.unit
KEY = b"s" * 32


def _fs(tmp_path: Path):  # type: ignore[no-untyped-def]
    from recovery.storage import open_fs

    return open_fs(f"file://{tmp_path}/ctl/run-1")


def _run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "home" / "runs" / "run-1"
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"job": 1}')
    (d / "journal.jsonl").write_text('{"type": "run_started"}\n')
    (d / "run.secret").write_bytes(b"x" * 32)
    (d / "notify.secret").write_text("token")
    return d


def test_what_changed_is_mirrored_and_read_back_and_secrets_never_are(tmp_path: Path) -> None:
    fs, root = _fs(tmp_path)
    run = _run_dir(tmp_path)
    acts: list[int] = []
    m = StateMirror(fs, root, KEY, "run-1", 1, str(run), may_act=lambda: acts.append(1))
    assert m.flush() and not m.flush()  # nothing changed: no write, no act
    with open(run / "journal.jsonl", "a") as fh:
        fh.write('{"type": "transition"}\n{"type": "tor')  # a line still being written
    assert m.flush() and len(acts) == 2
    got = read_mirror(fs, root, KEY, "run-1")
    assert (got.controller, got.seq) == (1, 2)
    assert got.files["journal.jsonl"] == b'{"type": "run_started"}\n{"type": "transition"}\n'
    assert set(got.files) == {"journal.jsonl", "config.json"}
    stored = b"".join(p.read_bytes() for p in (tmp_path / "ctl").rglob("*") if p.is_file())
    assert b"x" * 32 not in stored and b"token" not in stored
    # The journal went as two segments, the second only what was appended.
    blobs = sorted(p.read_bytes() for p in (tmp_path / "ctl/run-1/state/c1/blobs").iterdir())
    assert blobs == [b'{"job": 1}', b'{"type": "run_started"}\n', b'{"type": "transition"}\n']


def test_the_newest_controllers_mirror_that_verifies_wins(tmp_path: Path) -> None:
    fs, root = _fs(tmp_path)
    run = _run_dir(tmp_path)
    StateMirror(fs, root, KEY, "run-1", 1, str(run)).flush()
    (run / "result.json").write_text('{"status": "SUCCEEDED"}')
    StateMirror(fs, root, KEY, "run-1", 2, str(run)).flush()
    assert controllers(fs, root) == [2, 1]
    assert "result.json" in read_mirror(fs, root, KEY, "run-1").files
    # A planted later mirror, signed with another key, is passed over with its reason.
    StateMirror(fs, root, b"o" * 32, "run-1", 3, str(run)).flush()
    got = read_mirror(fs, root, KEY, "run-1")
    assert got.controller == 2 and got.skipped == [
        "c3: does not verify under this run's key (altered, or another key's)"
    ]


@pytest.mark.parametrize("tamper", ["blob", "index", "size", "name"])
def test_an_altered_mirror_is_never_used(tmp_path: Path, tamper: str) -> None:
    fs, root = _fs(tmp_path)
    run = _run_dir(tmp_path)
    StateMirror(fs, root, KEY, "run-1", 1, str(run)).flush()
    base = tmp_path / "ctl/run-1/state/c1"
    index = json.loads((base / "index.json").read_text())
    if tamper == "blob":
        sha = index["files"]["journal.jsonl"]["segments"][0]["sha256"]
        (base / "blobs" / sha).write_text('{"type": "forged"}\n')
    elif tamper == "index":
        index["seq"] = 99
        (base / "index.json").write_text(json.dumps(index))
    elif tamper == "size":
        (base / "index.json").write_text("x" * 70_000)
    else:
        index["files"]["../run.secret"] = index["files"]["config.json"]
        (base / "index.json").write_text(json.dumps(index))
    with pytest.raises(MirrorError, match="holds no mirror that verifies: c1"):
        read_mirror(fs, root, KEY, "run-1")


def test_no_mirror_at_all_says_so(tmp_path: Path) -> None:
    fs, root = _fs(tmp_path)
    with pytest.raises(MirrorError, match="holds no mirror of the run"):
        read_mirror(fs, root, KEY, "run-1")
    assert mirrored_bytes("config.json", b"{") == b"{"


def test_an_appended_file_goes_by_segments_and_each_byte_a_bounded_number_of_times() -> None:
    data, segs, uploaded = b"", (), 0
    for i in range(400):
        data += b"line %d\n" % i
        grew = bool(segs)
        new = segments_for(segs, data, grew)
        uploaded += sum(g.end - g.start for g in new if g not in segs)
        assert new[0].start == 0 and new[-1].end == len(data)
        assert all(a.end == b.start for a, b in itertools.pairwise(new))
        assert len(new) <= MAX_SEGMENTS
        segs = new
    assert uploaded < 4 * len(data)
    # Rewritten rather than appended to: the whole file again, as one.
    assert segments_for(segs, b"other\n", False) == segments_for((), b"other\n", False)


def test_a_rewritten_journal_is_mirrored_whole_again(tmp_path: Path) -> None:
    fs, root = _fs(tmp_path)
    run = _run_dir(tmp_path)
    m = StateMirror(fs, root, KEY, "run-1", 1, str(run))
    m.flush()
    (run / "journal.jsonl").write_text('{"type": "other"}\n{"type": "x"}\n')
    m.flush()
    assert read_mirror(fs, root, KEY, "run-1").files["journal.jsonl"] == b'{"type": "other"}\n{"type": "x"}\n'


@pytest.mark.parametrize(
    "plant", ["index-fifo", "index-symlink", "index-folder", "blob-fifo", "generation-file", "past-the-bound"]
)
def test_a_later_mirror_that_is_not_files_is_passed_over_with_its_reason(tmp_path: Path, plant: str) -> None:
    import os

    fs, root = _fs(tmp_path)
    run = _run_dir(tmp_path)
    StateMirror(fs, root, KEY, "run-1", 1, str(run)).flush()
    state = tmp_path / "ctl/run-1/state"
    later = state / "c2"
    if plant == "generation-file":
        later.write_text("not a folder")
    elif plant == "past-the-bound":
        StateMirror(fs, root, KEY, "run-1", 10**9, str(run)).flush()  # a store writer cannot sign it
    elif plant == "blob-fifo":
        StateMirror(fs, root, KEY, "run-1", 2, str(run)).flush()
        blob = next((later / "blobs").iterdir())
        blob.unlink()
        os.mkfifo(blob)
    else:
        later.mkdir()
        index = later / "index.json"
        if plant == "index-fifo":
            os.mkfifo(index)
        elif plant == "index-symlink":
            index.symlink_to(state / "c1" / "index.json")
        else:
            index.mkdir()
    got = read_mirror(fs, root, KEY, "run-1")
    assert got.controller == 1
    if plant in ("index-fifo", "index-symlink", "index-folder"):
        assert got.skipped and got.skipped[0].startswith("c2: index.json is not a file"), got.skipped
    elif plant == "blob-fifo":
        assert "is not a file" in got.skipped[0], got.skipped
    assert 10**9 not in controllers(fs, root)


def test_a_new_generations_folder_is_cleared_of_whatever_was_planted_there(tmp_path: Path) -> None:
    fs, root = _fs(tmp_path)
    run = _run_dir(tmp_path)
    state = tmp_path / "ctl/run-1/state"
    state.mkdir(parents=True)
    (state / "c1").write_text("a file where the generation's folder goes")
    m = StateMirror(fs, root, KEY, "run-1", 1, str(run))
    assert m.flush()
    assert read_mirror(fs, root, KEY, "run-1").controller == 1
    planted = state / "c2" / "blobs"
    planted.mkdir(parents=True)
    (planted / ("0" * 64)).write_text("stray")
    assert StateMirror(fs, root, KEY, "run-1", 2, str(run)).flush()
    assert not (planted / ("0" * 64)).exists()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", ["result.json", "loss.jsonl", "journal.jsonl"])
@pytest.mark.parametrize("shape", ["fifo", "link-out", "folder"])
def test_a_run_file_that_is_no_regular_one_never_holds_the_mirror_nor_leads_it_out(
    tmp_path: Path, name: str, shape: str
) -> None:
    # Planted in the run's folder during a live run: the mirror opens it as every reader of
    # the folder does (runstate.runfiles), leaves it out, and goes on with the rest.
    import os

    fs, root = _fs(tmp_path)
    run = _run_dir(tmp_path)
    m = StateMirror(fs, root, KEY, "run-1", 1, str(run))
    assert m.flush()
    outside = tmp_path / "outside.txt"
    outside.write_text("THEIRS")
    path = run / name
    path.unlink(missing_ok=True)
    if shape == "fifo":
        os.mkfifo(path)
    elif shape == "link-out":
        path.symlink_to(outside)
    else:
        path.mkdir()
    (run / "config.json").write_text('{"job": 2}')
    assert m.flush()
    got = read_mirror(fs, root, KEY, "run-1")
    assert got.files["config.json"] == b'{"job": 2}'
    assert all(b"THEIRS" not in data for data in got.files.values())
    expected = {"journal.jsonl": b'{"type": "run_started"}\n'}.get(name)  # as it was last mirrored
    assert got.files.get(name) == expected
