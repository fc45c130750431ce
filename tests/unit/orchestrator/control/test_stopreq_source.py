"""Where a request was asked (``source``): the command line's by default, the console's
when it says so, nothing else; and a request read without being taken."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestrator.control.stopreq import (
    DRILL_NAME,
    STOP_NAME,
    StopRequest,
    parse_request,
    peek_request,
    take_request,
    this_request,
    write_request,
)

pytestmark = pytest.mark.unit
GOOD = {"action": "stop", "user": "ana", "host": "box", "pid": 4242, "at": 1.7e9}


def test_a_request_without_a_source_is_the_command_lines_and_one_names_the_console() -> None:
    assert parse_request(json.dumps(GOOD).encode()) == StopRequest("ana", "box", 4242, 1.7e9, source="cli")
    console = parse_request(json.dumps({**GOOD, "source": "console"}).encode())
    assert console is not None and console.source == "console"
    assert parse_request(json.dumps(console.as_json()).encode()) == console
    for bad in ("web", "", None, 1, ["console"]):
        assert parse_request(json.dumps({**GOOD, "source": bad}).encode()) is None
    req = this_request("cancel", source="console")
    assert req.as_json()["source"] == "console" and this_request().source == "cli"


def test_a_request_is_peeked_at_and_left_for_the_controller(tmp_path: Path) -> None:
    assert peek_request(str(tmp_path)) is None
    write_request(str(tmp_path), this_request("stop", source="console"))
    seen = peek_request(str(tmp_path))
    assert seen is not None and seen.source == "console" and (tmp_path / STOP_NAME).exists()
    assert peek_request(str(tmp_path), DRILL_NAME) is None
    assert take_request(str(tmp_path)) == seen and peek_request(str(tmp_path)) is None


def test_what_is_no_request_is_not_peeked_at_as_one(tmp_path: Path) -> None:
    (tmp_path / STOP_NAME).write_text(json.dumps({**GOOD, "action": "drill", "fault": {"kind": "x"}}))
    os.chmod(tmp_path / STOP_NAME, 0o600)
    assert peek_request(str(tmp_path)) is None and (tmp_path / STOP_NAME).exists()
    os.unlink(tmp_path / STOP_NAME)
    os.symlink(tmp_path / "elsewhere", tmp_path / STOP_NAME)
    assert peek_request(str(tmp_path)) is None
