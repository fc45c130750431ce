"""Hostile run folders through ``python -m orchestrator``'s entry point, in-process.

Someone on the controller's machine plants, under one of a run's file names, what the
controller never writes there: a FIFO, a folder, a symlink to a file outside home, a
dangling symlink, a symlink loop, a file larger than any we write, or JSON that is not
what the file holds. Every action on such a run ends with exit status 2 and one stderr
line starting ``error:`` that names the file, within a few seconds, launching nothing and
writing nothing anywhere (home, and the file a link points to outside it, included).

``action=list`` surveys the whole home: the planted run is one UNREADABLE row naming the
file and the fix, every other run is listed as usual, and the list exits 0.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.__main__ import main
from orchestrator.control.stopreq import this_request
from orchestrator.runstate import events as E
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.rundir import LOCK_NAME, lock_controller
from tests.support.sandbox import launch_nothing, tree
from tests.unit.orchestrator.test_main_hostile import assert_quick, refused, since

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

RUN = "r1"
FILES = [
    "controller.lock",
    "supervisor.lock",
    "journal.jsonl",
    "result.json",
    "config.json",
    "stop.request",
    "drill.request",
    "run.secret",
    "notify.secret",
    "loss.jsonl",
]
ACTIONS: dict[str, list[str]] = {
    "status": ["action=status"],
    "list": ["action=list"],
    "stop": ["action=stop"],
    "watch": ["action=watch"],
    "resume": ["action=resume"],
    "drill": ["action=drill", "fault=kill_region"],
    "logs": ["action=logs"],
    "report": ["action=report"],
}
# Shapes no regular file has: refused by name, whichever action and whichever file.
KINDS = ["fifo", "folder", "link-out", "dangling-link", "link-loop"]
# Beyond the codec's bounds (16 MiB): sparse, so that it costs nothing to make.
HUGE = (16 << 20) + 2


@functools.cache  # the same for every run folder made here: composed once
def config_json() -> bytes:
    from orchestrator.config.compose import compose
    from orchestrator.wire.codec import to_plain

    return json.dumps(to_plain(compose([f"run_id={RUN}"]))).encode()


def make_run(runs: Path, run_id: str) -> Path:
    """A run whose controller died mid-run, every file of it a regular one as the
    controller writes it (no result.json yet, no request waiting)."""
    run_dir = runs / run_id
    run_dir.mkdir(parents=True)
    journal = Journal(str(run_dir / "journal.jsonl"))
    for event in (
        E.RunStarted(run_id=run_id, pid=1, config={"job": {"name": "digits", "steps": 500}}),
        E.Transition(RunState.PROVISIONING, RunState.PENDING),
        E.AttemptStarted(1, "local-a"),
        E.Transition(RunState.RUNNING, RunState.PROVISIONING),
    ):
        journal.emit(event)
    private = {
        "config.json": config_json(),
        "run.secret": os.urandom(32),
        "notify.secret": json.dumps({"version": 1, "run_id": run_id, "command": None, "webhook": None}).encode(),
        "loss.jsonl": b'{"generation": 1, "region": "local-a", "step": 10, "loss": 0.5}\n',
        "controller.lock": b"",
        "supervisor.lock": b"",
    }
    for name, data in private.items():
        (run_dir / name).write_bytes(data)
        (run_dir / name).chmod(0o600)
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """runs r0 and r1, made once (the journal fsyncs each line): each test gets a copy."""
    folder = tmp_path_factory.mktemp("template") / "runs"
    make_run(folder, "r0")
    make_run(folder, RUN)
    return folder


@pytest.fixture
def sandbox(tmp_path: Path, runs: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """home with run r1 (the one planted in) and r0 (left alone), a file outside home a
    link may point to, and nothing launchable."""
    for d in ("home", "user", "cwd", "outside"):
        (tmp_path / d).mkdir()
    (tmp_path / "outside" / "theirs.json").write_text('{"theirs": true}\n')
    shutil.copytree(runs, tmp_path / "home" / "runs")
    launch_nothing(monkeypatch, tmp_path / "home", tmp_path / "user", tmp_path / "cwd")
    yield tmp_path


def plant(root: Path, name: str, shape: str) -> Path:
    """``shape`` under ``name`` in r1's folder, in place of whatever was there."""
    path = root / "home" / "runs" / RUN / name
    if path.exists() or path.is_symlink():
        path.unlink()
    outside = root / "outside"
    if shape == "fifo":
        os.mkfifo(path)
    elif shape == "folder":
        path.mkdir()
    elif shape == "link-out":
        path.symlink_to(outside / "theirs.json")
    elif shape == "dangling-link":
        path.symlink_to(outside / "made-through-the-link")
    elif shape == "link-loop":
        path.symlink_to(path)
    elif shape == "oversize":
        path.write_bytes(b"")
        os.truncate(path, HUGE)
    elif shape == "json-list":
        path.write_bytes(b"[1, 2]\n")
    elif shape == "garbage":
        path.write_bytes(b"not json at all" if not name.endswith(".jsonl") else b"[" * 100_000 + b"\n")
    else:
        raise AssertionError(shape)
    return path


def listed(root: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """action=list over the planted home: exit 0, r0 listed as usual, r1 one UNREADABLE
    row whose note names the file; nothing written, in a few seconds."""
    before = tree(root)
    started = time.monotonic(), time.process_time()
    code = main(["action=list", "format=json"])
    took = since(started)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and err == ""
    assert code == 0
    rows = {r["run_id"]: r for r in json.loads(out)}
    assert rows["r0"]["status"] == "CONTROLLER_DIED", rows["r0"]
    assert rows[RUN]["status"] == "UNREADABLE" and rows[RUN]["reason"].startswith(f"{name}: "), rows[RUN]
    assert "\n" not in rows[RUN]["reason"]
    assert_quick(took)
    assert tree(root) == before, "something was written"


def act(root: Path, capsys: pytest.CaptureFixture[str], action: str, name: str) -> None:
    if action == "list":
        listed(root, capsys, name)
        return
    line = refused(root, [*ACTIONS[action], f"run_id={RUN}"], capsys, name)
    assert str(root / "home" / "runs" / RUN / name) in line, line


# --- the base folder is a run any action takes --------------------------------------------------


def test_the_unplanted_folder_is_one_every_reader_takes(sandbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["action=status", f"run_id={RUN}"]) == 0
    assert "CONTROLLER_DIED" in capsys.readouterr().out
    assert main(["action=list", "format=json"]) == 0
    assert {r["status"] for r in json.loads(capsys.readouterr().out)} == {"CONTROLLER_DIED"}


# --- what is no regular file: every file, every action ------------------------------------------

KIND_CASES = [(n, k, a) for n in FILES for k in KINDS for a in ACTIONS]


@pytest.mark.parametrize(("name", "shape", "action"), KIND_CASES, ids=[f"{a}-{n}-{k}" for n, k, a in KIND_CASES])
def test_a_file_that_is_no_regular_one_is_refused_by_every_action(
    sandbox: Path, capsys: pytest.CaptureFixture[str], name: str, shape: str, action: str
) -> None:
    plant(sandbox, name, shape)
    act(sandbox, capsys, action, name)
    assert (sandbox / "outside").exists() and sorted(os.listdir(sandbox / "outside")) == ["theirs.json"]


@pytest.mark.parametrize("shape", KINDS)
def test_the_error_says_what_the_file_is_and_the_fix(
    sandbox: Path, capsys: pytest.CaptureFixture[str], shape: str
) -> None:
    plant(sandbox, "controller.lock", shape)
    line = refused(sandbox, ["action=status", f"run_id={RUN}"], capsys, "controller.lock")
    what = {"fifo": "a FIFO", "folder": "a folder"}.get(shape, "a symlink")
    assert line.endswith(
        f"controller.lock: {what}, not a regular file; remove it or move it aside "
        "(a run's folder holds regular files only)"
    ), line


# --- what is a regular file but not what the run wrote: where an action reads it ----------------

# (file, shape, actions that read it). The journal's lines, result.json and config.json are
# read whole or line by line; loss.jsonl by action=report (a line that is JSON but no point
# is left out of the plot, as it is documented: only a line beyond the codec's bounds is damage).
CONTENT = [
    ("journal.jsonl", ["oversize", "json-list", "garbage"], ["status", "list", "watch", "resume", "logs", "report"]),
    (
        "result.json",
        ["oversize", "json-list", "garbage"],
        ["status", "list", "stop", "watch", "resume", "drill", "report"],
    ),
    ("config.json", ["oversize", "json-list", "garbage"], ["resume", "drill"]),
    ("loss.jsonl", ["oversize", "garbage"], ["report"]),
]
CONTENT_CASES = [(n, s, a) for n, shapes, actions in CONTENT for s in shapes for a in actions]


@pytest.mark.parametrize(("name", "shape", "action"), CONTENT_CASES, ids=[f"{a}-{n}-{s}" for n, s, a in CONTENT_CASES])
def test_a_file_that_is_not_what_the_run_wrote_is_refused_where_it_is_read(
    sandbox: Path, capsys: pytest.CaptureFixture[str], name: str, shape: str, action: str
) -> None:
    plant(sandbox, name, shape)
    held = None
    if action == "drill" and name == "config.json":
        # A drill reads config.json only for a run whose controller is alive: held here as one holds it.
        held = lock_controller(str(sandbox / "home" / "runs" / RUN))
        assert held is not None
    try:
        act(sandbox, capsys, action, name)
    finally:
        if held is not None:
            held.close()


# --- the reproductions, one each ----------------------------------------------------------


@pytest.mark.parametrize("action", ["status", "list", "stop", "watch", "resume"])
@pytest.mark.parametrize("name", ["controller.lock", "journal.jsonl", "result.json"])
def test_a_fifo_hangs_no_action(sandbox: Path, capsys: pytest.CaptureFixture[str], name: str, action: str) -> None:
    plant(sandbox, name, "fifo")
    act(sandbox, capsys, action, name)


@pytest.mark.parametrize("first_look", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize(("name", "action"), [("stop.request", "stop"), ("drill.request", "drill")])
def test_a_request_that_is_a_folder_is_one_line(
    sandbox: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    action: str,
    first_look: bool,
) -> None:
    from orchestrator.runstate import rundir

    if not first_look:
        # Without the entry point's look: the request's own write refuses the folder.
        monkeypatch.setattr(rundir, "check_run_folder", lambda run_dir: None)
    plant(sandbox, name, "folder")
    held = lock_controller(str(sandbox / "home" / "runs" / RUN))  # a live controller, which a request asks
    assert held is not None
    try:
        act(sandbox, capsys, action, name)
    finally:
        held.close()


@pytest.mark.parametrize("action", ["resume", "drill"])
def test_a_config_that_is_a_json_list_is_one_line(
    sandbox: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    plant(sandbox, "config.json", "json-list")
    held = lock_controller(str(sandbox / "home" / "runs" / RUN))
    assert held is not None
    try:
        line = refused(sandbox, [*ACTIONS[action], f"run_id={RUN}"], capsys, "config.json")
    finally:
        held.close()
    assert "is list, not a JSON object" in line, line


@pytest.mark.parametrize("action", ["status", "stop", "watch", "resume", "drill", "logs", "report"])
def test_a_lock_that_links_out_of_home_is_neither_followed_nor_made(
    sandbox: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    plant(sandbox, LOCK_NAME, "dangling-link")
    act(sandbox, capsys, action, LOCK_NAME)
    assert not (sandbox / "outside" / "made-through-the-link").exists()


def test_a_new_run_under_a_planted_name_is_refused_before_anything_starts(
    sandbox: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = sandbox / "home" / "runs" / "fresh"
    run_dir.mkdir()
    os.mkfifo(run_dir / LOCK_NAME)
    refused(sandbox, ["job=digits", "run_id=fresh"], capsys, LOCK_NAME)


def test_a_stop_request_is_still_what_stop_writes(sandbox: Path) -> None:
    # The shape a stop asks for is a regular file: the base folder with one is no planted one.
    from orchestrator.control.stopreq import write_request

    write_request(str(sandbox / "home" / "runs" / RUN), this_request("stop"))
    assert main(["action=status", f"run_id={RUN}"]) == 0


# --- each reader on its own: the entry point's first look at the folder taken away -------------

# What each action opens of the run's folder itself (the rest it never opens). Without the
# entry point's check (rundir.check_run_folder), each of these opens still refuses.
READS = {
    "status": ["controller.lock", "journal.jsonl", "result.json"],
    "list": ["controller.lock", "journal.jsonl", "result.json"],
    "stop": ["controller.lock", "result.json"],
    "watch": ["controller.lock", "supervisor.lock", "journal.jsonl", "result.json"],
    "resume": ["controller.lock", "journal.jsonl", "result.json", "config.json"],
    "drill": ["controller.lock", "result.json"],
    "logs": ["journal.jsonl"],
    "report": ["journal.jsonl", "result.json", "loss.jsonl"],
}
READER_CASES = [(n, k, a) for a, names in READS.items() for n in names for k in KINDS]


@pytest.mark.parametrize(("name", "shape", "action"), READER_CASES, ids=[f"{a}-{n}-{k}" for n, k, a in READER_CASES])
def test_each_reader_refuses_on_its_own(
    sandbox: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    shape: str,
    action: str,
) -> None:
    from orchestrator.runstate import rundir

    monkeypatch.setattr(rundir, "check_run_folder", lambda run_dir: None)
    plant(sandbox, name, shape)
    act(sandbox, capsys, action, name)
