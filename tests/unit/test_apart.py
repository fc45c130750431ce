"""When a full run sends groups of tests apart, and what it reports of them (tests/support/apart.py)."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support import apart
from tests.support.apart import GROUPS, Apart, Started
from tests.support.paths import REPO


def config(**options: Any) -> Any:
    opt = {
        "markexpr": apart.DEFAULT_MARKEXPR,
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


def test_only_the_default_full_run_sends_groups_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(apart.ENV, raising=False)
    assert apart.wanted(config())
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
    assert not any(apart.wanted(c) for c in narrower)
    monkeypatch.setenv(apart.ENV, "0")
    assert not apart.wanted(config())


def test_an_xdist_worker_never_starts_them() -> None:
    worker = config()
    worker.workerinput = {}
    assert not apart.wanted(worker)


def test_every_group_runs_what_exists_and_the_main_run_leaves_exactly_that() -> None:
    for group in GROUPS:
        assert group.paths and all((REPO / p).exists() for p in group.paths), group
    running = Apart(REPO, [Started(g, None, Path("log"), Path("f")) for g in GROUPS])  # type: ignore[arg-type]
    assert running.owns(REPO / "tests" / "unit")
    assert running.owns(REPO / "tests" / "chaos" / "test_onprem.py")
    assert not running.owns(REPO / "tests" / "chaos")
    assert running.owns(REPO / "tests" / "chaos" / "test_hedge.py")
    assert not running.owns(REPO / "tests" / "chaos" / "test_faults.py")
    assert not running.owns(REPO / "tests" / "integration" / "providers" / "skypilot")


def test_each_session_hands_out_ports_of_its_own() -> None:
    ranges = apart.port_ranges(3, 20000, 32767)
    bounds = [tuple(int(p) for p in r.split("-")) for r in ranges]
    assert bounds[0][0] == 20000 and bounds[-1][1] <= 32767
    assert all(hi < lo2 for (_, hi), (lo2, _) in itertools.pairwise(bounds))


class Proc:
    def __init__(self, code: int | None) -> None:
        self.returncode = code
        self.pid = 0

    def poll(self) -> int | None:
        return self.returncode


def started(tmp_path: Path, code: int | None, output: str) -> Started:
    log = tmp_path / "unit.log"
    log.write_text(output)
    return Started(GROUPS[0], Proc(code), log, tmp_path)  # type: ignore[arg-type]


def test_a_passed_group_is_one_line_with_its_counts(tmp_path: Path) -> None:
    done = started(tmp_path, 0, "....\n===== 4869 passed, 2 skipped in 98.29s =====\n\n")
    assert apart.wait(done, timeout_s=1) == 0
    assert apart.summary(done) == ["apart, unit (exit 0): 4869 passed, 2 skipped in 98.29s"]


def test_a_failed_group_shows_its_failures_and_keeps_its_log(tmp_path: Path) -> None:
    output = "FAILED tests/unit/test_x.py::test_y - assert 1 == 2\n===== 1 failed, 3 passed in 1.0s =====\n"
    failed = started(tmp_path, 1, output)
    assert apart.wait(failed, timeout_s=1) == 1
    lines = apart.summary(failed)
    assert lines[0] == "apart, unit (exit 1): 1 failed, 3 passed in 1.0s"
    assert any("test_x.py::test_y" in line for line in lines)
    apart.cleanup(failed)
    assert failed.log.exists()
