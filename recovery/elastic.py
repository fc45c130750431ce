"""Elastic world sizes: how many workers a region fits, which the run may go on with,
and which of the run's logical shards each worker trains. Pure.

A run's global batch is that of ``trainer.workers`` workers whatever the number that
trains it: the data is cut into ``workers`` logical shards per step, as with the full
world, and a world of ``w`` workers takes them round-robin (worker ``r`` trains the
shards ``r, r + w, ...``), one micro-batch each, accumulating their gradients. No
sample is skipped or repeated whatever ``w`` is, and at ``w == workers`` every worker
trains its own shard alone: the run is exactly the one that never shrank.
"""

from __future__ import annotations

import math


def node_workers(num_cpus: float, num_gpus: float, cpus_per_worker: float, gpus_per_worker: float) -> int:
    """Workers one node of ``num_cpus`` CPUs and ``num_gpus`` GPUs fits."""
    fit = math.floor(num_cpus / cpus_per_worker + 1e-9) if cpus_per_worker > 0 else 1 << 30
    if gpus_per_worker > 0:
        fit = min(fit, math.floor(num_gpus / gpus_per_worker + 1e-9))
    return max(0, int(fit))


def capacity(nodes: int, num_cpus: float, num_gpus: float, cpus_per_worker: float, gpus_per_worker: float) -> int:
    """Workers a region of ``nodes`` alike nodes fits (a worker never spans nodes)."""
    return max(0, nodes) * node_workers(num_cpus, num_gpus, cpus_per_worker, gpus_per_worker)


def min_world(workers: int, min_workers: int) -> int:
    """trainer.min_workers with its default (0: trainer.workers) resolved."""
    return workers if min_workers <= 0 else min(min_workers, workers)


def world_size(fits: int, workers: int, min_workers: int) -> int | None:
    """The world the run goes on with where ``fits`` workers fit: as many as fit, at most
    ``workers``; None when fewer than ``min_workers`` (its default resolved) fit."""
    world = min(fits, workers)
    return world if world >= min_world(workers, min_workers) else None


def shards(rank: int, world: int, workers: int) -> list[int]:
    """The logical shards (of ``workers``) that worker ``rank`` of ``world`` trains."""
    if not 0 <= rank < world <= workers:
        raise ValueError(f"rank {rank} of a world of {world} with {workers} logical shards")
    return list(range(rank, workers, world))


def decide_world(
    fits_now: int,
    word_fits: int | None,
    wait_until: float,
    now: float,
    workers: int,
    min_workers: int,
) -> int | None:
    """The world a worker group (re)starts with, or None to wait.

    ``fits_now``: workers the cluster's live nodes fit, as Ray sees them (a node that
    died moments ago may still count); ``word_fits`` and ``wait_until``: the
    controller's word on the region's nodes (None: no word), which knows a node lost
    before Ray does and whether a replacement is coming: until ``wait_until`` the group
    waits for it, and the exact run goes on at the full world. Past it, the run goes on
    with what fits, if at least ``min_workers``; otherwise it waits (the controller
    fails the region over).
    """
    if now < wait_until:
        return None
    fits = fits_now if word_fits is None else min(fits_now, word_fits)
    return world_size(fits, workers, min_workers)
