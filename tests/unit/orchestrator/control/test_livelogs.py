"""Live logs (orchestrator/control/livelogs.py): whole lines as they come, each prefixed with its source."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.control.livelogs import READ_CHUNK, LiveLogs, Tail

pytestmark = pytest.mark.unit


def test_tail_gives_whole_lines_as_they_come_and_goes_on_in_another_file(tmp_path: Path) -> None:
    tail, live, kept = Tail(), tmp_path / "live.log", tmp_path / "kept.log"
    live.write_bytes(b"one\ntw")
    assert tail.read("k", str(live)) == ["one"]
    assert tail.read("k", str(live)) == []
    with live.open("ab") as fh:
        fh.write(b"o\nthree\n")
    assert tail.read("k", str(live)) == ["two", "three"]
    kept.write_bytes(live.read_bytes() + b"four\nfive")
    assert tail.read("k", str(kept)) == ["four"]
    assert tail.rest("k") == "five" and tail.rest("k") is None
    assert tail.read("gone", str(tmp_path / "none")) == []
    endless = tmp_path / "endless.log"
    endless.write_bytes(b"x" * (READ_CHUNK + 10))  # a line that never ends: shown, not held
    assert tail.read("e", str(endless)) == [] and tail.read("e", str(endless)) == ["x" * (READ_CHUNK + 10)]


def test_live_logs_prefix_each_line_with_its_source(tmp_path: Path) -> None:
    live = tmp_path / "logs"
    live.mkdir()
    (live / "rank-1.log").write_text("step 1\n")
    driver = tmp_path / "runtime.log"
    driver.write_text("connected\npartial")
    said: list[str] = []
    logs = LiveLogs(1, str(driver), str(live), said.append, every_s=3600)
    logs.poll()
    (live / "rank-1.log").write_text("step 1\nstep 2\n")
    logs.poll()  # within every_s: nothing read
    logs.poll(final=True)
    assert said == ["[driver] connected", "[rank 1] step 1", "[driver] partial", "[rank 1] step 2"]


@pytest.mark.timeout(30)
def test_a_log_that_is_a_fifo_or_a_link_gives_no_lines_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "rank-0.log")
    (tmp_path / "theirs").write_text("not this run's\n")
    (tmp_path / "rank-1.log").symlink_to(tmp_path / "theirs")
    tail = Tail()
    assert tail.read("a", str(tmp_path / "rank-0.log")) == []
    assert tail.read("b", str(tmp_path / "rank-1.log")) == []
