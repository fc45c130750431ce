"""Runs from any machine: action=list, status and report with cloud.control_store read the
runs of another home from their verified mirrors in a ``file://`` control store, mark
them as the store's, show what does not verify as UNVERIFIED with its reason and nothing
of its content, and never write to this home.

The runs are made as a controller makes them (tests/support/mirrored.py: typed events
through ``Journal.emit``, result.json through ``write_result``, mirrored with
``StateMirror`` under the state key derived from the control key)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from orchestrator.__main__ import main
from orchestrator.commands import remote
from orchestrator.commands.remote import (
    LOCAL,
    SHOWN,
    STORE,
    StoreError,
    read_newest,
    run_ids,
    scratch_base,
    store_runs,
)
from orchestrator.commands.runs_list import CONTROLLER_DIED, HEADER, SOURCE_HEADER, UNVERIFIED_RUN, render_table
from orchestrator.config.compose import compose
from orchestrator.control.mirror import MIRRORED
from orchestrator.errors import ConfigError
from tests.support.mirrored import hold_lease, mirror, state_key, write_run

pytestmark = pytest.mark.unit
KEY = "c0ffee" * 11
OTHER_KEY = "f00d" * 16


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"file://{tmp_path}/ctl"


@pytest.fixture
def teammate(tmp_path: Path, store: str) -> Path:
    """Another machine's home, its runs mirrored to the store: one that succeeded, one that
    failed, one whose controller lives (its lease holds) and one whose controller is gone."""
    home = tmp_path / "a"
    for run_id, ended in (("r-done", "SUCCEEDED"), ("r-failed", "FAILED"), ("r-live", None), ("r-dead", None)):
        mirror(write_run(home, run_id, store, ended=ended, losses=20), store, KEY.encode())
    hold_lease(store, KEY.encode(), "r-live")
    return home


def run(argv: list[str], monkeypatch: pytest.MonkeyPatch, key: str | None = KEY) -> int:
    # The key is read as a takeover reads it, out of the environment: set again for each command.
    if key is None:
        monkeypatch.delenv("ORCHESTRATOR_CONTROL_KEY", raising=False)
    else:
        monkeypatch.setenv("ORCHESTRATOR_CONTROL_KEY", key)
    return main(argv)


def listed(home: Path, store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    assert run(["action=list", f"home={home}", f"cloud.control_store={store}", "format=json"], monkeypatch) == 0
    return json.loads(capsys.readouterr().out)


# --- listing ----------------------------------------------------------------------------------


def test_a_fresh_home_lists_another_homes_runs_from_the_store_verified(
    tmp_path: Path, store: str, teammate: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh = tmp_path / "b"
    rows = {r["run_id"]: r for r in listed(fresh, store, monkeypatch, capsys)}
    assert set(rows) == {"r-done", "r-failed", "r-live", "r-dead"}
    assert {r["source"] for r in rows.values()} == {STORE}
    assert (rows["r-done"]["status"], rows["r-done"]["step"], rows["r-done"]["job"]) == ("SUCCEEDED", 500, "digits")
    assert (rows["r-failed"]["status"], rows["r-failed"]["reason"]) == ("FAILED", "no region left to fail over to")
    # Alive while its verified lease holds; gone, the command that takes it over from here.
    assert rows["r-live"]["status"] == "RUNNING" and rows["r-live"]["reason"] == ""
    assert rows["r-dead"]["status"] == CONTROLLER_DIED
    assert f"action=resume run_id=r-dead cloud.control_store={store}" in rows["r-dead"]["reason"]
    assert not fresh.exists(), "reading the store writes nothing to this home"

    assert run(["action=list", f"home={fresh}", f"cloud.control_store={store}"], monkeypatch) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RUN", "ID", *HEADER[1:], SOURCE_HEADER]
    assert all(line.split()[-1] == STORE for line in lines[1:5])


def test_the_temporary_home_is_private_and_gone_when_the_command_ends(store: str, teammate: Path) -> None:
    with store_runs(store, {}, KEY.encode()) as found:
        home = Path(found.home)
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert sorted(p.name for p in (home / "runs").iterdir()) == ["r-dead", "r-done", "r-failed", "r-live"]
        # A list reads what a row needs: not the loss series, nor config.json (the journal has the config).
        assert sorted(p.name for p in (home / "runs" / "r-done").iterdir()) == ["journal.jsonl", "result.json"]
        assert sorted(p.name for p in (home / "runs" / "r-live").iterdir()) == ["journal.jsonl"]
        assert not list((home / "runs" / "r-done").glob("run.secret")), "no secret is written"
        assert [r.run_id for r in found.rows()][-1] == "r-done"
    assert not home.exists()
    with store_runs(store, {}, KEY.encode(), only="r-done", files=SHOWN) as found:
        assert list(found.runs) == ["r-done"]
        assert sorted(p.name for p in Path(found.home, "runs", "r-done").iterdir()) == sorted(MIRRORED)


def test_the_temporary_home_goes_to_tmpdir_when_set_else_to_memory_where_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert scratch_base() is None  # tempfile's choice: TMPDIR
    monkeypatch.delenv("TMPDIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(remote, "MIN_SCRATCH_FREE", 0)
    assert scratch_base() == str(tmp_path)
    monkeypatch.setattr(remote, "MIN_SCRATCH_FREE", 1 << 62)  # no room anywhere
    assert scratch_base() is None


def test_a_run_this_home_holds_shows_once_as_this_homes(
    tmp_path: Path, store: str, teammate: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same run id here, still going by this home's journal; the store's says it succeeded.
    write_run(tmp_path / "b", "r-done", "file:///elsewhere", ended=None)
    rows = listed(tmp_path / "b", store, monkeypatch, capsys)
    mine = [r for r in rows if r["run_id"] == "r-done"]
    assert len(mine) == 1 and mine[0]["source"] == LOCAL and mine[0]["status"] == CONTROLLER_DIED
    assert "cloud.control_store" not in mine[0]["reason"], "this home's run goes on by a resume here"
    assert len(rows) == 4


def test_a_job_name_with_markup_stays_text_in_the_json(
    tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "<script>alert(1)</script>"
    mirror(write_run(tmp_path / "a", "r-x", store, job=name), store, KEY.encode())
    (row,) = listed(tmp_path / "b", store, monkeypatch, capsys)
    assert row["job"] == name and row["source"] == STORE


# --- what does not verify ---------------------------------------------------------------------


def _forge(tmp_path: Path, store: str, how: str) -> None:
    run_dir = write_run(tmp_path / "a", "r-forged", store, job="forged-job")
    state = tmp_path / "ctl" / "r-forged" / "state" / "c1"
    if how == "another key":
        mirror(run_dir, store, OTHER_KEY.encode())
        return
    mirror(run_dir, store, KEY.encode())
    index = state / "index.json"
    if how == "unsealed index":
        body = json.loads(index.read_text())
        del body["mac"]
        index.write_text(json.dumps(body))
    elif how == "blob altered":
        entry = json.loads(index.read_text())["files"]["journal.jsonl"]["segments"][0]
        blob = state / "blobs" / entry["sha256"]
        blob.write_bytes(blob.read_bytes().replace(b"forged-job", b"forged-jab"))


FORGERIES = {
    "unsealed index": "c1: index.json is not an index",
    "another key": "c1: index.json does not verify under this run's key",
    "blob altered": "c1/journal.jsonl: a segment does not match its index's sha256",
}


@pytest.mark.parametrize("how", list(FORGERIES))
def test_a_mirror_that_does_not_verify_is_listed_unverified_with_its_reason_and_nothing_else(
    tmp_path: Path, store: str, how: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _forge(tmp_path, store, how)
    (row,) = listed(tmp_path / "b", store, monkeypatch, capsys)
    assert (row["run_id"], row["status"], row["source"]) == ("r-forged", UNVERIFIED_RUN, STORE)
    assert FORGERIES[how] in row["reason"] and row["reason"].startswith("not shown: its mirror")
    assert all(row[k] is None for k in ("job", "region", "step", "total", "started_at", "duration_s"))

    argv = [f"home={tmp_path / 'b'}", f"cloud.control_store={store}"]
    assert run(["action=list", *argv], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "forged-j" not in out and "r-forged: not shown: its mirror" in out
    for action in ("status", "report"):
        assert run([f"action={action}", "run_id=r-forged", *argv], monkeypatch) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert captured.err.startswith(f"error: run_id: run 'r-forged' in cloud.control_store {store} is not shown")


def test_a_newer_mirror_that_does_not_verify_is_passed_over_for_the_one_that_does(tmp_path: Path, store: str) -> None:
    from recovery.storage import open_fs

    run_dir = write_run(tmp_path / "a", "r1", store)
    mirror(run_dir, store, KEY.encode(), controller=1)
    mirror(run_dir, store, OTHER_KEY.encode(), controller=7)  # planted above it
    fs, root = open_fs(f"{store}/r1")
    got = read_newest(fs, root, state_key(KEY.encode(), "r1"), "r1", ("journal.jsonl", "config.json"))
    assert got is not None and got.controller == 1 and set(got.files) == {"journal.jsonl", "config.json"}
    assert got.skipped == ["c7: index.json does not verify under this run's key (altered, or another key's)"]
    assert read_newest(fs, f"{root}/nothing", b"k" * 32, "r1", ()) is None


# --- status and report ------------------------------------------------------------------------


def test_status_of_a_run_from_the_store_says_where_it_was_read_and_whether_its_controller_lives(
    tmp_path: Path, store: str, teammate: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [f"home={tmp_path / 'b'}", f"cloud.control_store={store}"]
    assert run(["action=status", "run_id=r-done", *argv], monkeypatch) == 0
    out = capsys.readouterr().out
    assert f"source     cloud.control_store {store} (the mirror of controller 1, written " in out
    assert "status     SUCCEEDED" in out and "step       500/500" in out
    assert run(["action=status", "run_id=r-live", *argv], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "status     RUNNING" in out and "alive (its lease in the control store holds)" in out
    assert run(["action=status", "run_id=r-dead", *argv], monkeypatch) == 0
    out = capsys.readouterr().out
    assert f"status     {CONTROLLER_DIED}  (no controller holds its lease in the control store; take it over" in out
    assert run(["action=status", "run_id=r-none", *argv], monkeypatch) == 2
    err = capsys.readouterr().err
    assert err == f"error: run_id: no run named 'r-none' under {tmp_path / 'b'}, nor in cloud.control_store {store}\n"
    assert not (tmp_path / "b").exists()


def test_report_of_a_run_from_the_store_writes_its_plot_outside_the_home(
    tmp_path: Path, store: str, teammate: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    argv = ["action=report", "run_id=r-failed", f"home={tmp_path / 'b'}", f"cloud.control_store={store}"]
    assert run(argv, monkeypatch) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"source: cloud.control_store {store}")
    assert "incident report: run r-failed: FAILED" in out
    plot = Path(out.strip().splitlines()[-1].removeprefix("plot: "))
    assert plot.is_file() and plot.parent.parent == tmp_path / "tmp" and plot.name == "report.png"
    assert (plot.parent / "report.txt").is_file()
    # The temporary home is gone; the report's folder alone stays.
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == [plot.parent.name]
    assert not (tmp_path / "b").exists()


# --- refusals: one line each ------------------------------------------------------------------


def test_without_a_control_key_one_line_names_the_key_to_set(
    tmp_path: Path, store: str, teammate: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [f"home={tmp_path / 'b'}", f"cloud.control_store={store}"]
    for action in (["action=status", "run_id=r-done"], ["action=report", "run_id=r-done"]):
        assert run([*action, *argv], monkeypatch, key=None) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert captured.err.startswith("error: cloud.control_key: env:ORCHESTRATOR_CONTROL_KEY is unset")
        assert "export ORCHESTRATOR_CONTROL_KEY=" in captured.err
    # A list without a key is this home's runs, and one line on how to see the store's.
    write_run(tmp_path / "b", "mine", store)
    assert run(["action=list", *argv], monkeypatch, key=None) == 0
    captured = capsys.readouterr()
    assert "mine" in captured.out and "r-done" not in captured.out
    assert captured.err.count("\n") == 1 and "export ORCHESTRATOR_CONTROL_KEY=" in captured.err
    # A key too short is the key's own one line.
    assert run(["action=list", *argv], monkeypatch, key="short") == 2
    assert capsys.readouterr().err.startswith("error: cloud.control_key: env:ORCHESTRATOR_CONTROL_KEY gives 5 char")


def test_a_run_of_this_home_needs_no_key(
    tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "b", "mine", store)
    argv = ["run_id=mine", f"home={tmp_path / 'b'}", f"cloud.control_store={store}"]
    assert run(["action=status", *argv], monkeypatch, key=None) == 0
    out = capsys.readouterr().out
    assert "status     SUCCEEDED" in out and "source" not in out


def test_an_unreachable_store_is_one_line_naming_cloud_control_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import recovery.storage

    class Unreachable:
        protocol = "s3"

        def invalidate_cache(self, path: str) -> None:
            pass

        def ls(self, path: str, detail: bool = True) -> list[Any]:
            raise ConnectionError("Could not connect to the endpoint URL\nsecond line")

    monkeypatch.setattr(recovery.storage, "open_fs", lambda url, options=None: (Unreachable(), "bucket/control"))
    argv = ["action=list", f"home={tmp_path / 'b'}", "cloud.control_store=s3://bucket/control"]
    assert run(argv, monkeypatch) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: cloud.control_store: cannot read s3://bucket/control (ConnectionError: Could not connect to the "
        "endpoint URL); check the URL, that this machine reaches it, and cloud.control_options\n"
    )
    with pytest.raises(StoreError, match=r"^cloud\.control_store: cannot read"):
        with store_runs("s3://bucket/control", {}, KEY.encode()):
            pass


def test_the_store_and_the_key_are_checked_with_these_actions(tmp_path: Path) -> None:
    home = f"home={tmp_path}"
    for action in ("action=list", "action=status", "action=report"):
        extra = [] if action == "action=list" else ["run_id=r1"]
        cfg = compose([action, *extra, home, "cloud.control_store=file:///shared/control"])
        assert cfg.cloud.control_store == "file:///shared/control"
        with pytest.raises(ConfigError, match=r"^cloud\.control_store: got 'memory://x'"):
            compose([action, *extra, home, "cloud.control_store=memory://x"])
        with pytest.raises(ConfigError, match=r"^cloud\.control_key: got 'nope'"):
            compose([action, *extra, home, "cloud.control_store=file:///c", "cloud.control_key=nope"])


# --- what is read, bounded --------------------------------------------------------------------


def test_only_folders_named_like_run_ids_are_read_the_newest_first_up_to_the_limit(tmp_path: Path, store: str) -> None:
    from recovery.storage import open_fs

    ctl = tmp_path / "ctl"
    for i, name in enumerate(["r1", "r2", "r3", "_pools", ".hidden", "-x"]):
        (ctl / name).mkdir(parents=True)
        os.utime(ctl / name, (1000 + i, 1000 + i))
    (ctl / "a-file").write_text("x")
    os.symlink(ctl / "r1", ctl / "a-link")
    fs, root = open_fs(store)
    assert run_ids(fs, root, 2) == (["r3", "r2"], 1)
    assert run_ids(fs, root, 10, skip={"r2"}) == (["r3", "r1"], 0)
    assert run_ids(fs, f"{root}/missing", 10) == ([], 0)


def test_the_table_marks_where_each_row_was_read_and_keeps_its_columns() -> None:
    from orchestrator.commands.runs_list import RunRow

    rows = [RunRow("r1", "SUCCEEDED", source=LOCAL), RunRow("r2", UNVERIFIED_RUN, reason="not shown", source=STORE)]
    lines = render_table(rows).splitlines()
    assert lines[0].split()[-1] == SOURCE_HEADER and lines[0].split()[:-1] == ["RUN", "ID", *HEADER[1:]]
    assert [line.split()[-1] for line in lines[1:3]] == [LOCAL, STORE]
    assert lines[-1] == "r2: not shown"
    assert "source" not in RunRow("r1", "SUCCEEDED").as_json()


def test_no_runs_here_nor_in_the_store_says_where_it_looked(
    tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["action=list", f"home={tmp_path / 'b'}", f"cloud.control_store={store}"]
    assert run(argv, monkeypatch) == 0
    assert capsys.readouterr().out == (
        f"no runs under {tmp_path / 'b'}, nor in {store}; start one with: python -m orchestrator job=digits\n"
    )
    assert run([*argv, "format=json"], monkeypatch) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_mirror_with_no_journal_line_yet_is_no_run_to_show(
    tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "a" / "runs" / "r-new"
    run_dir.mkdir(parents=True)
    (run_dir / "journal.jsonl").write_text("")
    (run_dir / "config.json").write_text("{}")
    mirror(run_dir, store, KEY.encode())
    argv = ["action=status", "run_id=r-new", f"home={tmp_path / 'b'}", f"cloud.control_store={store}"]
    assert run(argv, monkeypatch) == 2
    assert capsys.readouterr().err == (
        f"error: run_id: run 'r-new' in cloud.control_store {store} has no journal line yet\n"
    )


def test_a_run_that_cannot_be_copied_here_is_its_own_row_and_the_rest_are_listed(
    store: str, teammate: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = remote._write_new

    def full(path: str, data: bytes) -> None:
        if "r-failed" in path:
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(remote, "_write_new", full)
    with store_runs(store, {}, KEY.encode()) as found:
        rows = {r.run_id: r for r in found.rows()}
        assert not Path(found.home, "runs", "r-failed").exists()
    assert rows["r-failed"].status == "UNREADABLE" and "No space left on device); set TMPDIR" in rows["r-failed"].reason
    assert rows["r-done"].status == "SUCCEEDED"
