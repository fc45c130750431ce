"""Elastic world sizes: what a region fits, what a run goes on with, who trains which shard."""

from __future__ import annotations

import pytest

from recovery.elastic import capacity, min_world, node_workers, shards, world_size

pytestmark = pytest.mark.unit


def test_a_node_fits_by_cpus_and_by_gpus_when_workers_want_them() -> None:
    assert node_workers(2, 0, 1.0, 0.0) == 2
    assert node_workers(1, 0, 1.0, 0.0) == 1
    assert node_workers(3, 0, 1.5, 0.0) == 2
    assert node_workers(8, 2, 1.0, 1.0) == 2
    assert node_workers(8, 0, 1.0, 0.5) == 0
    assert capacity(2, 1, 0, 1.0, 0.0) == 2
    assert capacity(3, 1, 0, 2.0, 0.0) == 0


def test_the_world_is_what_fits_up_to_workers_and_never_under_min_workers() -> None:
    assert world_size(4, 2, 0) == 2
    assert world_size(1, 2, 0) is None  # min_workers 0 is workers: no elasticity
    assert world_size(1, 2, 1) == 1
    assert world_size(2, 4, 3) is None
    assert world_size(3, 4, 3) == 3
    assert min_world(4, 0) == 4 and min_world(4, 2) == 2 and min_world(4, 9) == 4


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 6])
def test_every_logical_shard_is_trained_once_at_every_world_size(workers: int) -> None:
    for world in range(1, workers + 1):
        taken = sorted(s for rank in range(world) for s in shards(rank, world, workers))
        assert taken == list(range(workers))
    # The full world: each worker its own shard, as a run that never shrank.
    assert [shards(r, workers, workers) for r in range(workers)] == [[r] for r in range(workers)]


def test_a_rank_outside_the_world_is_refused() -> None:
    with pytest.raises(ValueError):
        shards(2, 2, 4)
    with pytest.raises(ValueError):
        shards(0, 3, 2)
