"""action=plan's table (orchestrator/commands/plan.py): one row per candidate region, what the
optimizer found or why it found nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.commands.plan import Placement, main, render, unavailable_lines
from orchestrator.config.compose import compose

pytestmark = pytest.mark.unit


def test_a_row_per_placement_in_order_with_its_cost_spot_and_task() -> None:
    rows = render(
        [
            Placement(
                1,
                "aws-east",
                "aws/us-east-1",
                instance_type="t3.small",
                use_spot=True,
                hourly_cost=0.04321,
                yaml_path="/tmp/a.yaml",
            ),
            Placement(2, "gcp-west", "gcp/us-west1", num_nodes=2, accelerators="L4:1", yaml_path="/tmp/b.yaml"),
        ]
    ).splitlines()
    assert rows[0].split() == ["#", "region", "infra", "instance", "accelerators", "nodes", "$/hour", "task"]
    assert rows[1].split() == [
        "1",
        "aws-east",
        "aws/us-east-1",
        "t3.small",
        "(spot)",
        "-",
        "1",
        "0.0432",
        "/tmp/a.yaml",
    ]
    assert rows[2].split() == ["2", "gcp-west", "gcp/us-west1", "-", "L4:1", "2", "-", "/tmp/b.yaml"]


def test_an_unavailable_region_says_why_instead_of_a_price() -> None:
    (_, row) = render([Placement(1, "aws-east", "aws/us-east-1", unavailable="no m6i.large in us-east-1")]).splitlines()
    assert row.endswith("unavailable: no m6i.large in us-east-1") and "$" not in row


def test_each_region_that_cannot_run_the_job_is_one_error_line() -> None:
    lines = unavailable_lines(
        [
            Placement(1, "us-east-1", "aws/us-east-1", unavailable="ResourcesMismatchError: Infeasible: A10G"),
            Placement(2, "us-west-2", "aws/us-west-2", instance_type="m6i.xlarge"),
        ]
    )
    assert lines == ["error: cloud.regions.us-east-1: cannot run the job: ResourcesMismatchError: Infeasible: A10G"]


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
