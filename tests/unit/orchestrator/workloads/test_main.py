"""python -m orchestrator.workloads: a job's workload constructed in a process of its own,
its answer one JSON object on stdout (run here in-process, on the tinywork fixture)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from orchestrator.commands.run import construct_answer
from orchestrator.workloads.__main__ import main
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.unit

RAISES = """
from tinywork import Tiny

class Odd(Tiny):
    def __init__(self, params):
        print("noisy constructor")
        raise ValueError("hidden must be even, got 3")
"""


def answer(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], job: dict, path: list[str]) -> str:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"job": job, "path": path})))
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert main() == 0
    return capsys.readouterr().out


def test_a_constructor_that_raises_is_named_with_its_line_and_nothing_else_reaches_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "odd_ctor.py").write_text(RAISES)
    for name in ("odd_ctor", "tinywork"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    out = answer(monkeypatch, capsys, {"workload": "odd_ctor:Odd", "params": {}}, [str(tmp_path), str(FIXTURES)])
    problem = construct_answer(out)
    assert problem is not None and problem.key == "job.workload"
    assert f"odd_ctor:Odd(job.params) raised ValueError at {tmp_path / 'odd_ctor.py'}:7: hidden must be even" in str(
        problem
    )


def test_a_workload_that_constructs_answers_nothing_to_refuse(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "tinywork", raising=False)
    out = answer(monkeypatch, capsys, {"workload": "tinywork:Tiny", "params": {}}, [str(FIXTURES)])
    assert json.loads(out) == {} and construct_answer(out) is None


def test_no_answer_to_go_by_refuses_nothing() -> None:
    assert construct_answer("") is None and construct_answer("Segmentation fault") is None
    assert construct_answer('{"key": "job.workload", "message": "m"}') is not None
