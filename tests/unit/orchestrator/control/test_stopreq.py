"""action=stop's request file: what counts as a request, and the thread that acts on one."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from orchestrator.control.stopreq import (
    DRILL_NAME,
    MAX_BYTES,
    STOP_NAME,
    StopRequest,
    StopWatch,
    clear_request,
    file_acceptable,
    parse_request,
    take_request,
    this_request,
    write_request,
)
from orchestrator.runstate.runfiles import DamagedFile

pytestmark = pytest.mark.unit
GOOD = {"action": "stop", "user": "ana", "host": "box", "pid": 4242, "at": 1.7e9}


def raw(**over: object) -> bytes:
    return json.dumps({**GOOD, **over}).encode()


def test_a_well_formed_request_is_read_with_who_asked() -> None:
    req = parse_request(raw())
    assert req == StopRequest(user="ana", host="box", pid=4242, at=1.7e9)
    assert req.who() == "ana@box pid 4242"
    assert parse_request(json.dumps(req.as_json()).encode()) == req
    cancel = parse_request(raw(action="cancel"))
    assert cancel is not None and cancel.action == "cancel" and req.action == "stop"
    assert parse_request(json.dumps(cancel.as_json()).encode()) == cancel


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xff\xfe",
        b"[1, 2]",
        b"null",
        b"[" * 100_000,  # deep nesting
        raw(action="kill"),
        raw(action=["cancel"]),
        raw(user=""),
        raw(user="x" * 256),
        raw(user="ana\x1b[2J"),  # terminal control in a name the journal and screens show
        raw(host=["box"]),
        raw(pid=0),
        raw(pid=True),
        raw(pid=2**40),
        raw(pid="12"),
        raw(at=float("nan")),
        raw(at=-1),
        raw(at=True),
        raw(host="h" * 200, user="u" * 200) + b" " * MAX_BYTES,  # too long
    ],
)
def test_hostile_or_malformed_content_is_no_request(content: bytes) -> None:
    assert parse_request(content) is None


def test_only_a_private_regular_file_of_this_user_is_acted_on(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(raw())
    f.chmod(0o600)
    uid = os.getuid()
    assert file_acceptable(os.stat(f), uid)
    assert not file_acceptable(os.stat(f), uid + 1)
    f.chmod(0o620)
    assert not file_acceptable(os.stat(f), uid)
    f.chmod(0o602)
    assert not file_acceptable(os.stat(f), uid)
    f.chmod(0o600)
    f.write_bytes(b" " * (MAX_BYTES + 1))
    assert not file_acceptable(os.stat(f), uid)
    assert not file_acceptable(os.stat(tmp_path), uid)


def test_a_written_request_is_private_taken_once_and_a_bad_one_is_removed(tmp_path: Path) -> None:
    req = this_request()
    write_request(str(tmp_path), req)
    path = tmp_path / STOP_NAME
    assert path.stat().st_mode & 0o777 == 0o600
    assert take_request(str(tmp_path)) == req
    assert not path.exists() and take_request(str(tmp_path)) is None
    path.write_bytes(b"{not json")
    assert take_request(str(tmp_path)) is None and not path.exists()
    # A link (to a file the request's reader could be tricked into reading) is no request.
    target = tmp_path / "elsewhere"
    target.write_bytes(raw())
    path.symlink_to(target)
    assert take_request(str(tmp_path)) is None and not path.exists() and target.exists()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", [STOP_NAME, DRILL_NAME])
def test_a_request_that_is_a_fifo_or_a_folder_is_no_request_and_never_waited_on(tmp_path: Path, name: str) -> None:
    os.mkfifo(tmp_path / name)
    assert take_request(str(tmp_path), name) is None and not (tmp_path / name).exists()
    (tmp_path / name).mkdir()
    assert take_request(str(tmp_path), name) is None  # cannot be removed: stays no request
    clear_request(str(tmp_path), name)
    with pytest.raises(DamagedFile, match=f"{name}: a folder, not a regular file"):
        write_request(str(tmp_path), this_request("drill" if name == DRILL_NAME else "stop"), name)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "the request's temporary is left behind"


def test_the_watch_interrupts_the_main_thread_once_a_request_comes(tmp_path: Path, sigint_default: None) -> None:
    watch = StopWatch(str(tmp_path), poll_s=0.01).start()
    write_request(str(tmp_path), this_request())
    with pytest.raises(KeyboardInterrupt):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.01)
    watch.disarm()
    assert watch.request is not None and watch.request.pid == os.getpid()


def test_a_disarmed_watch_acts_on_nothing(tmp_path: Path) -> None:
    watch = StopWatch(str(tmp_path), poll_s=0.01).start()
    watch.disarm()
    write_request(str(tmp_path), this_request())
    time.sleep(0.1)
    assert watch.request is None and (tmp_path / STOP_NAME).exists()


def test_a_drill_carries_its_fault_and_only_a_drill_does(tmp_path: Path) -> None:
    from orchestrator.control.stopreq import DRILL_NAME, STOP_NAME, take_request, this_request, write_request

    drill = parse_request(raw(action="drill", fault={"kind": "kill_region"}))
    assert drill is not None and drill.fault == {"kind": "kill_region"}
    assert parse_request(raw(action="drill")) is None
    assert parse_request(raw(action="drill", fault="kill_region")) is None
    assert parse_request(raw(fault={"kind": "kill_region"})) is None  # a stop carries none
    # Each file holds its own kind: a drill put where a stop goes is no request, and back.
    write_request(str(tmp_path), this_request("drill", {"kind": "preempt"}), STOP_NAME)
    assert take_request(str(tmp_path), STOP_NAME) is None
    write_request(str(tmp_path), this_request("stop"), DRILL_NAME)
    assert take_request(str(tmp_path), DRILL_NAME) is None
    write_request(str(tmp_path), this_request("drill", {"kind": "preempt"}), DRILL_NAME)
    got = take_request(str(tmp_path), DRILL_NAME)
    assert got is not None and got.fault == {"kind": "preempt"} and not (tmp_path / DRILL_NAME).exists()
