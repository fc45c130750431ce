"""When a full run sends its unit tier apart, and what it reports of it (tests/support/unit_apart.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support import unit_apart
from tests.support.unit_apart import Apart


def config(**options: Any) -> Any:
    opt = {
        "markexpr": unit_apart.DEFAULT_MARKEXPR,
        "keyword": "",
        "lf": False,
        "failedfirst": False,
        "collectonly": False,
        "numprocesses": None,
        "usepdb": False,
    }
    source = options.pop("args_source", pytest.Config.ArgsSource.TESTPATHS)
    opt.update(options)
    return SimpleNamespace(
        option=SimpleNamespace(**opt), args_source=source, getoption=lambda name, default=None: opt.get(name, default)
    )


def test_only_the_default_full_run_sends_its_unit_tier_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(unit_apart.ENV, raising=False)
    assert unit_apart.wanted(config())
    narrower = [
        config(args_source=pytest.Config.ArgsSource.ARGS),  # pytest tests/chaos/test_x.py
        config(markexpr="unit"),
        config(markexpr="chaos"),
        config(keyword="hedge"),
        config(lf=True),
        config(failedfirst=True),
        config(collectonly=True),
        config(numprocesses=2),
        config(usepdb=True),
    ]
    assert not any(unit_apart.wanted(c) for c in narrower)
    monkeypatch.setenv(unit_apart.ENV, "0")
    assert not unit_apart.wanted(config())


def test_an_xdist_worker_never_starts_one() -> None:
    worker = config()
    worker.workerinput = {}
    assert not unit_apart.wanted(worker)


class Proc:
    def __init__(self, code: int | None) -> None:
        self.returncode = code
        self.pid = 0

    def poll(self) -> int | None:
        return self.returncode


def apart(tmp_path: Path, code: int | None, output: str) -> Apart:
    log = tmp_path / "unit.log"
    log.write_text(output)
    return Apart(Proc(code), log, tmp_path)  # type: ignore[arg-type]


def test_a_passed_unit_tier_is_one_line_with_its_counts(tmp_path: Path) -> None:
    done = apart(tmp_path, 0, "....\n===== 4869 passed, 2 skipped in 98.29s =====\n\n")
    assert unit_apart.wait(done, timeout_s=1) == 0
    assert unit_apart.summary(done) == ["unit tier (run apart, exit 0): 4869 passed, 2 skipped in 98.29s"]


def test_a_failed_unit_tier_shows_its_failures_and_keeps_its_log(tmp_path: Path) -> None:
    output = "FAILED tests/unit/test_x.py::test_y - assert 1 == 2\n===== 1 failed, 3 passed in 1.0s =====\n"
    failed = apart(tmp_path, 1, output)
    assert unit_apart.wait(failed, timeout_s=1) == 1
    lines = unit_apart.summary(failed)
    assert lines[0] == "unit tier (run apart, exit 1): 1 failed, 3 passed in 1.0s"
    assert any("test_x.py::test_y" in line for line in lines)
    unit_apart.cleanup(failed)
    assert failed.log.exists()
