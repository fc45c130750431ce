"""action=plan's table on SkyPilot (providers/skypilot/plan.py): one row per candidate region,
what the optimizer found or why it found nothing."""

from __future__ import annotations

import pytest

from providers.skypilot.plan import Placement, render, unavailable_lines

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
