"""``orchestrator.api.background``: a controller that would not start, as one RunError
with the line its log gave (the background start itself replaced: nothing starts here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.api import background
from orchestrator.api.config import compose
from orchestrator.commands import detach
from orchestrator.errors import RunError

pytestmark = pytest.mark.unit


def _started(monkeypatch: pytest.MonkeyPatch, done: detach.Detached) -> None:
    monkeypatch.setattr(detach, "start", lambda cfg, words, run_id, wait_s: done)


def test_a_refusal_before_the_child_and_a_child_that_ended_are_run_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = compose("action=resume", "run_id=r1", home=tmp_path)
    _started(monkeypatch, detach.Detached("r1", "/log", code=2, said="run_id: no run named 'r1' under /h"))
    with pytest.raises(RunError, match=r"^run_id: no run named 'r1' under /h$"):
        background.start(cfg, [], "r1", 1.0)
    _started(monkeypatch, detach.Detached("r1", "/log", pid=9, code=1, said="starting\n"))
    with pytest.raises(RunError, match=r"^starting$"):
        background.start(cfg, [], "r1", 1.0)
    _started(monkeypatch, detach.Detached("r1", "/log", pid=9, code=1, said=""))
    with pytest.raises(RunError, match=r"^run r1: its controller exited \(1\); see /log$"):
        background.start(cfg, [], "r1", 1.0)


def test_a_child_with_nothing_to_do_or_one_that_started_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = compose("action=resume", "run_id=r1", home=tmp_path)
    for done in (detach.Detached("r1", "/log", 9, code=0, said="already finished"), detach.Detached("r1", "/l", 9)):
        _started(monkeypatch, done)
        background.start(cfg, [], "r1", 1.0)


def test_the_refusal_is_the_last_error_line_else_the_last_line() -> None:
    assert background.refusal("a\nerror: first\nb\nerror: second\n\n") == "second"
    assert background.refusal("a\nthe end\n") == "the end"
    assert background.refusal("") == ""
