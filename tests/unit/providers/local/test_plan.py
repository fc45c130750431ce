"""action=plan on the local provider (providers/local/plan.py): a row per candidate region in
failover order, the cluster it would start and what it costs (nothing)."""

from __future__ import annotations

import pytest

from orchestrator.config.compose import compose
from providers.local.plan import local_plan

pytestmark = pytest.mark.unit


def test_a_row_per_candidate_region_in_failover_order_with_its_nodes_and_no_cost() -> None:
    cfg = compose(["cloud=local", "cloud.candidates=[local-c,local-a]", "cloud.regions.local-a.nodes=3"])
    plan = local_plan(cfg)
    header, first, second, *rest = plan.lines
    assert header.split() == ["#", "region", "nodes", "CPUs/node", "GPUs/node", "$/hour", "cluster"]
    assert first.split()[:6] == ["1", "local-c", "1", "2", "0", "0.0000"]
    assert second.split()[:6] == ["2", "local-a", "3", "2", "0", "0.0000"]
    assert "and 2 worker node(s) on 127.0.0.1" in second
    assert any(line.startswith("cost ") and "$0/hour" in line for line in rest)
    assert plan.errors == () and plan.files == {}, "nothing to refuse, nothing to write"
