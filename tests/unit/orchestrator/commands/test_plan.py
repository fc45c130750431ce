"""action=plan (orchestrator/commands/plan.py): the run's provider plans, the command prints
its lines under one header, writes its files and fails on a region that cannot run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.commands.plan import main
from orchestrator.config.compose import compose
from providers.base import Plan

pytestmark = pytest.mark.unit


def test_without_skypilot_a_plan_is_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cfg = compose(["cloud=aws", "action=plan", f"home={tmp_path}"])
    monkeypatch.setitem(sys.modules, "sky", None)  # import sky raises ModuleNotFoundError
    assert main(cfg) == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1 and "pip install -c constraints.txt -e '.[aws]'" in lines[0], lines
    assert "Traceback" not in out.err
    assert not any(tmp_path.iterdir()), "nothing written"


def test_a_local_plan_lists_the_clusters_it_would_start_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(compose(["cloud=local", "action=plan", f"home={tmp_path}", "run_id=p1"])) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert lines[0] == "plan p1: job digits on local, placements in failover order"
    assert [line.split()[1] for line in lines if line[:1].isdigit()] == ["local-a", "local-b", "local-c"]
    assert out.err == "" and not any(tmp_path.iterdir())


class _Planner:
    name = "fake"

    def plan(self, cfg: Any, run_id: str, out_dir: str) -> Plan:
        errors = ("error: cloud.regions.r2: cannot run the job: no room",)
        return Plan(("row 1", "row 2"), errors, {f"{out_dir}/01.yaml": "a: 1\n"})


def test_the_providers_files_are_written_and_a_region_that_cannot_run_fails_the_plan(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr("providers.registry.get_provider", lambda *a, **k: _Planner())
    assert main(compose(["cloud=local", "action=plan", f"home={tmp_path}", "run_id=p2"])) == 1
    out = capsys.readouterr()
    assert out.out.splitlines()[1:] == ["row 1", "row 2"]
    assert out.err == "error: cloud.regions.r2: cannot run the job: no room\n"
    assert (tmp_path / "plans" / "p2" / "01.yaml").read_text() == "a: 1\n"
    # A plan is no run: nothing under runs/, so action=list has no row for it.
    assert not (tmp_path / "runs").exists()
