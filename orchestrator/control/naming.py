"""Which cluster an attempt runs on: the name a new one is launched under, or the last
attempt's, kept for a restart in place. Pure: the caller brings what the journal and the
provider know.

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

from recovery.detection import FailureKind

# Failures the policy restarts in the same region (recovery/policy.py) that say nothing
# against the cluster: the driver was lost on a healthy cluster, or the workload raised.
RESTARTED_IN_PLACE = frozenset({FailureKind.RUNTIME_LOST, FailureKind.USER_ERROR})


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


def keep_for_restart(failure: FailureKind | None, *, keeps_runtime: bool, runtime_ended: bool, up: bool) -> bool:
    """Is the ended attempt's cluster kept for the next attempt, rather than torn down?
    Only where the provider keeps runtimes (a launch there costs most of a minute), for a
    failure the policy restarts in place and that is not the cluster's, when the cluster
    is up and the attempt's runtime has ended (a driver that may still be training is
    never left beside the next one: that cluster goes). The next attempt takes it only
    in the same region (``AttemptRunner``); otherwise it is torn down then."""
    return keeps_runtime and failure in RESTARTED_IN_PLACE and runtime_ended and up
