"""Placement by expected cost to finish: the formula, step by step, and the ranking."""

from __future__ import annotations

import math

import pytest

from recovery.placement import Outlook, geography, learned_rate, rank, score

pytestmark = pytest.mark.unit


def o(region: str, usd: float | None = 1.0, rate: float = 0.0, setup_s: float = 0.0, **kw: object) -> Outlook:
    return Outlook(region, usd, rate, provision_s=setup_s, startup_s=0.0, restore_s=0.0, **kw)  # type: ignore[arg-type]


def test_a_region_that_never_fails_finishes_in_its_setup_and_the_work() -> None:
    s = score(o("a", 2.0, setup_s=360.0), work_h=10.0, interval_h=0.5, correlated_rate_per_h=0.0)
    assert s.expected_hours == pytest.approx(0.1 + 10.0)
    assert s.expected_usd == pytest.approx(2.0 * 10.1)


def test_each_loss_costs_its_setup_and_half_an_interval_again() -> None:
    # 0.1 losses an hour, each costing 0.1 h of setup and 0.25 h of lost work: 3.5% more.
    s = score(o("a", 1.0, rate=0.1, setup_s=360.0), work_h=10.0, interval_h=0.5, correlated_rate_per_h=0.0)
    assert s.expected_hours == pytest.approx(0.1 + 10.0 / (1 - 0.1 * 0.35))


def test_losses_faster_than_progress_never_finish() -> None:
    s = score(o("a", 1.0, rate=10.0, setup_s=3600.0), work_h=1.0, interval_h=0.0, correlated_rate_per_h=0.0)
    assert math.isinf(s.expected_hours) and s.as_dict()["expected_hours"] is None


def test_egress_is_paid_once_and_the_correlated_region_weighs_more_losses() -> None:
    s = score(o("a", 1.0, egress_usd=0.5, correlated=True), work_h=1.0, interval_h=1.0, correlated_rate_per_h=0.5)
    assert s.rate_per_h == 0.5
    assert s.expected_usd == pytest.approx(1.0 / (1 - 0.5 * 0.5) + 0.5)


def test_the_cheapest_to_finish_ranks_first_not_the_cheapest_an_hour() -> None:
    cheap_but_flaky = o("spot", 0.3, rate=2.0, setup_s=900.0)
    dear_but_steady = o("on-demand", 0.35)
    table = rank([cheap_but_flaky, dear_but_steady], work_h=10.0, interval_h=0.5)
    assert [s.region for s in table] == ["on-demand", "spot"]
    # Without its losses, the spot region is the cheaper.
    table = rank([o("spot", 0.3, setup_s=900.0), dear_but_steady], work_h=10.0, interval_h=0.5)
    assert table[0].region == "spot"


def test_unpriced_regions_rank_after_priced_ones_by_hours_and_the_listed_order_breaks_ties() -> None:
    table = rank([o("x", None, setup_s=10.0), o("y", None), o("b", 1.0), o("a", 1.0)], work_h=1.0, interval_h=0.1)
    assert [s.region for s in table] == ["b", "a", "y", "x"]


def test_the_learned_rate_is_the_declared_one_weighed_as_an_hour_updated_by_what_the_run_met() -> None:
    assert learned_rate(0.5, 0, 0.0) == 0.5
    assert learned_rate(0.0, 2, 1.0) == pytest.approx(1.0)  # 2 losses in 1 h, a prior of 0 for 1 h
    assert learned_rate(0.5, 0, 9.0) == pytest.approx(0.05)
    assert learned_rate(float("nan"), 1, float("inf")) == 1.0


@pytest.mark.parametrize(
    ("infra", "geo"),
    [("aws/us-east-1", ("aws", "us")), ("gcp/europe-west4", ("gcp", "europe")), ("", None), ("slurm/c", None)],
)
def test_geography_is_cloud_and_continent_and_none_off_the_clouds(infra: str, geo: tuple[str, str] | None) -> None:
    assert geography(infra) == geo
