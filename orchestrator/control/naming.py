"""Which name an attempt's cluster is launched under. Pure: the caller brings what the
journal and the provider know.

A provider whose clusters leave their node runtime behind when they are lost (SkyPilot
on Slurm: the per-cluster home with its runtime, and skylet's folder) gets one name per
run and region, so that a failover back into a region used before finds that runtime
and skips its install. A launch under a name SkyPilot still knows adopts what runs
under it, so the run's name is used only once the journal says its last cluster was
torn down and the provider knows nothing running under it; otherwise the attempt gets
a name of its own generation, as every cluster of every other provider does.
"""

from __future__ import annotations

from collections.abc import Callable, Collection


def region_name(run_id: str, region: str) -> str:
    """The run's one name for its clusters in ``region`` (providers that keep runtimes)."""
    return f"{run_id}-{region}"


def generation_name(run_id: str, region: str, generation: int) -> str:
    """A name no other attempt of the run has: the generation's own."""
    return f"{region_name(run_id, region)}-g{generation}"


def cluster_name(
    run_id: str,
    region: str,
    generation: int,
    *,
    keeps_runtime: bool,
    owned: Collection[str],
    in_use: Callable[[str], bool],
) -> str:
    """The name for the attempt (or standby) of ``generation`` in ``region``.

    ``owned``: the run's clusters the journal shows provisioned and not torn down (one
    may be a teardown still under way, or one that failed: a launch under its name
    would adopt whatever is left of it). ``in_use(name)``: whether the provider still
    knows a cluster of that name (asked only when the journal says it is free)."""
    if not keeps_runtime:
        return generation_name(run_id, region, generation)
    name = region_name(run_id, region)
    if name in owned or in_use(name):
        return generation_name(run_id, region, generation)
    return name


def candidate_names(run_id: str, region: str, generation: int) -> tuple[str, str]:
    """Every name ``cluster_name`` may have given that attempt: what a controller that
    crashed mid-launch may have left under (resume looks for both)."""
    return region_name(run_id, region), generation_name(run_id, region, generation)
