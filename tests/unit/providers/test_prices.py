"""A node's hourly price: the region's own, the shipped catalog snapshot's (the cheapest
zone, spot or on-demand), or unpriced with the key that prices it."""

from __future__ import annotations

import pytest

from providers.prices import node_price, region_nodes, region_prices, snapshot_date

pytestmark = pytest.mark.unit


def test_hourly_cost_is_the_price_and_says_so() -> None:
    p = node_price("local-a", {"hourly_cost": 2.5, "infra": "aws/us-east-1", "instance_type": "m6i.xlarge"})
    assert p.usd_per_hour == 2.5 and p.source == "cloud.regions.local-a.hourly_cost"


def test_the_catalog_gives_the_cheapest_zones_on_demand_and_spot_price() -> None:
    on_demand = node_price("e", {"infra": "aws/us-east-1", "instance_type": "m6i.xlarge"})
    spot = node_price("e", {"infra": "aws/us-east-1", "instance_type": "m6i.xlarge", "use_spot": True})
    assert on_demand.usd_per_hour == pytest.approx(0.192)
    assert spot.usd_per_hour == pytest.approx(0.0748)  # of two zones, the cheaper
    assert snapshot_date() in spot.source and "spot" in spot.source and "on-demand" in on_demand.source
    gcp = node_price("c", {"infra": "gcp/europe-west4", "instance_type": "n2-standard-4"})
    assert gcp.usd_per_hour == pytest.approx(0.21366)


def test_accelerators_alone_take_the_cheapest_instance_that_has_them() -> None:
    p = node_price("g", {"infra": "aws/us-west-2", "accelerators": "A10G:1"})
    assert p.usd_per_hour == pytest.approx(1.006) and "g5.xlarge" in p.source


@pytest.mark.parametrize(
    ("region", "why"),
    [
        ({}, "set cloud.regions.x.hourly_cost"),
        ({"infra": "slurm/mycluster"}, "no catalog for infra 'slurm/mycluster'"),
        ({"infra": "aws/us-east-1"}, "no instance_type or accelerators"),
        ({"infra": "aws/ap-south-9", "instance_type": "m6i.xlarge"}, "not in the catalog snapshot"),
        ({"hourly_cost": "cheap"}, "is not a price"),
        ({"hourly_cost": float("nan")}, "is not a price"),
    ],
)
def test_what_cannot_be_priced_is_unpriced_and_says_how_to_price_it(region: dict, why: str) -> None:
    p = node_price("x", region)
    assert p.usd_per_hour is None and why in p.source


def test_a_configs_regions_are_priced_and_sized() -> None:
    config = {"cloud": {"regions": {"a": {"hourly_cost": 1.0, "nodes": 3}, "b": {"num_nodes": 2}, "c": "junk"}}}
    assert {n: p.usd_per_hour for n, p in region_prices(config).items()} == {"a": 1.0, "b": None}
    assert region_nodes(config) == {"a": 3, "b": 2}
    assert region_prices({"cloud": None}) == {} and region_nodes({}) == {}
