"""The fleet simulation's pieces, on traces whose every loss is known."""

from __future__ import annotations

import math

import pytest

from benchmarks.fleet import Run, Trace, fleet, simulate

pytestmark = pytest.mark.unit

REGIONS = fleet()
QUIET = {r.name: 0.0 for r in REGIONS}


def run(work_h: float = 4.0, deadline_h: float | None = None, gb: float = 0.0) -> Run:
    return Run(work_h=work_h, setup_h=0.01, deadline_h=deadline_h, declared=QUIET, checkpoint_gb=gb)


def test_the_catalog_prices_the_fleet_and_the_cheapest_spot_is_us_central1() -> None:
    cheapest = min(REGIONS, key=lambda r: r.spot_usd)
    assert cheapest.name == "us-central1" and cheapest.spot_usd == pytest.approx(0.047)
    assert all(r.on_demand_usd > r.spot_usd for r in REGIONS)


def test_a_run_no_loss_meets_pays_its_hours_in_its_first_region() -> None:
    for policy, first in (("listed", "us-east-1"), ("cheapest", "us-central1"), ("cost", "us-central1")):
        out = simulate(policy, REGIONS, run(), Trace())
        price = next(r.spot_usd for r in REGIONS if r.name == first)
        assert out.losses == 0 and out.wall_h == pytest.approx(4.01)
        assert out.usd == pytest.approx(price * 4.01), policy


def test_a_preemption_loses_the_work_since_the_checkpoint_and_moves_the_run() -> None:
    trace = Trace(preempt={"us-central1": [1.1]})
    out = simulate("cheapest", REGIONS, run(), trace)
    # Trained 1.09 h, kept 1.0 h (the last 15-minute checkpoint); 3 h more after a restart.
    assert out.losses == 1 and out.wall_h == pytest.approx(1.1 + 0.01 + 3.0)


def test_cost_placement_leaves_regions_the_run_learned_are_reclaimed_often() -> None:
    # The two cheapest spot regions are reclaimed every 18 minutes; cheapest-first goes back
    # and forth between them, cost placement learns their rate and leaves for a steady one.
    flaky = [0.3 * i for i in range(1, 80)]
    trace = Trace(preempt={"us-central1": flaky, "europe-west4": flaky})
    cheapest = simulate("cheapest", REGIONS, run(work_h=6.0), trace)
    cost = simulate("cost", REGIONS, run(work_h=6.0), trace)
    assert cost.losses < cheapest.losses and cost.wall_h < cheapest.wall_h


def test_a_far_checkpoint_costs_its_egress_and_copy_under_cost_placement() -> None:
    trace = Trace(down={"us-central1": [(1.1, 1000.0)]})  # the cheapest region down: the run leaves it
    near = simulate("cost", REGIONS, run(gb=0.0), trace)
    far = simulate("cost", REGIONS, run(gb=40.0), trace)
    assert far.usd > near.usd and far.wall_h > near.wall_h


def test_after_a_reclaim_cost_relaunches_in_the_cheapest_region_and_cheapest_first_leaves_it() -> None:
    trace = Trace(preempt={"us-central1": [1.1]})
    cheapest_spot = min(r.spot_usd for r in REGIONS)
    cost = simulate("cost", REGIONS, run(work_h=4.0), trace)
    eager = simulate("cheapest", REGIONS, run(work_h=4.0), trace)
    assert cost.losses == eager.losses == 1
    # Cost stayed on the cheapest capacity; eager-next-region paid another region's price after 1.1 h.
    assert cost.usd < eager.usd
    assert cost.usd == pytest.approx(cheapest_spot * cost.wall_h, rel=0.01)


def test_a_region_without_spot_capacity_after_a_reclaim_refuses_the_relaunch() -> None:
    trace = Trace(preempt={"us-central1": [1.1]}, dry={"us-central1": [(1.1, 50.0)]})
    out = simulate("cost", REGIONS, run(work_h=4.0), trace)
    assert out.losses == 2  # the reclaim, then the relaunch refused
    stayed = simulate("cost", REGIONS, run(work_h=4.0), Trace(preempt={"us-central1": [1.1]}))
    assert out.usd > stayed.usd and out.wall_h > stayed.wall_h  # the rest paid elsewhere, after a refusal


def test_a_deadline_run_out_of_slack_finishes_on_demand_and_meets_it() -> None:
    # Reclaimed every 12 minutes, before any 15-minute checkpoint: spot alone never finishes.
    storm = Trace(preempt={r.name: [0.2 * i for i in range(1, 200)] for r in REGIONS})
    out = simulate("cost", REGIONS, run(work_h=2.0, deadline_h=2.6), storm)
    assert not out.missed and out.wall_h <= 2.6
    assert out.usd > 2.0 * min(r.spot_usd for r in REGIONS), "on-demand hours were paid"
    no_deadline = simulate("cost", REGIONS, run(work_h=2.0), storm)
    assert no_deadline.missed and no_deadline.wall_h > 2.6


def test_an_outage_refuses_launches_until_it_ends() -> None:
    down = Trace(down={r.name: [(0.0, 1.0)] for r in REGIONS})
    out = simulate("listed", REGIONS, run(work_h=1.0), down)
    assert out.wall_h >= 1.0 + 1.0 and not math.isinf(out.wall_h)
