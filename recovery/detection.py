"""Failure detection: from what we can observe of an attempt to what failed. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# Exit codes of the runtime driver (orchestrator.runtime); a negative code is a signal.
EXIT_OK = 0
EXIT_USER_ERROR = 3
EXIT_WORKERS_EXHAUSTED = 4
EXIT_INFRA = 5
EXIT_PREEMPTED = 6  # a preemption notice: the step's checkpoint is committed


class FailureKind(StrEnum):
    CLUSTER_LOST = "cluster_lost"  # the provider says the cluster is gone
    LEASE_EXPIRED = "lease_expired"  # no heartbeat within the lease: hung or partitioned
    RUNTIME_LOST = "runtime_lost"  # the driver died, the cluster is still up
    USER_ERROR = "user_error"  # the workload raised
    PREEMPTED = "preempted"  # a preemption notice, honoured: checkpointed and stopped
    CONTROLLER_LOST = "controller_lost"  # the controller died; a resumed one found this attempt gone
    WORKERS_EXHAUSTED = "workers_exhausted"  # Ray Train used up its in-place restarts
    NO_CAPACITY = "no_capacity"  # provisioning: try another region
    PROVISION_ERROR = "provision_error"  # provisioning: a transient error, retries used up
    PROVISION_TIMEOUT = "provision_timeout"  # provisioning: not up within recovery.provision_timeout_s
    PRECHECK = "precheck"  # provisioning: credentials or config; retrying cannot help


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    region: str
    detail: str = ""


@dataclass(frozen=True)
class Observation:
    """One look at a running attempt."""

    runtime_exit: int | None  # None while the driver runs
    cluster_healthy: bool
    heartbeat_age_s: float | None  # None before the first heartbeat
    running_for_s: float  # since the runtime started
    user_error: str | None = None  # a user_error event from the workers


@dataclass(frozen=True)
class Lease:
    interval_s: float
    timeout_s: float
    # Before the first heartbeat the driver is still starting (imports, Ray connect).
    startup_grace_s: float = 120.0


# A driver that dies with its node dies first: the node's own signs of death (the
# head's process reaped, its port closed) lag by a moment, longer under load.
HEALTH_SETTLE_S = 2.0


def confirm_health(obs: Observation) -> bool:
    """Whether a healthy-looking cluster must be looked at again before ``classify``.

    The driver died unexpectedly (a signal, an infra exit) while its cluster still
    looked healthy: read at once, a region lost with everything on it passes for a
    lost driver, and the run restarts in the region it should leave.
    """
    code = obs.runtime_exit
    return (
        code is not None
        and code not in (EXIT_OK, EXIT_USER_ERROR, EXIT_PREEMPTED)
        and obs.cluster_healthy
        and obs.user_error is None
    )


def classify(obs: Observation, region: str, lease: Lease) -> Failure | None:
    """What failed, or None while the attempt looks healthy (or has succeeded)."""
    if obs.runtime_exit == EXIT_OK:
        return None
    if obs.user_error is not None:
        return Failure(FailureKind.USER_ERROR, region, obs.user_error)
    if not obs.cluster_healthy:
        return Failure(FailureKind.CLUSTER_LOST, region, "the cluster's head is gone")
    if obs.runtime_exit is not None:
        code = obs.runtime_exit
        if code == EXIT_USER_ERROR:
            return Failure(FailureKind.USER_ERROR, region, "the workload raised")
        if code == EXIT_PREEMPTED:
            return Failure(FailureKind.PREEMPTED, region, "preemption notice: checkpointed and stopped")
        if code == EXIT_WORKERS_EXHAUSTED:
            return Failure(FailureKind.WORKERS_EXHAUSTED, region, "Ray Train gave up restarting workers")
        how = f"signal {-code}" if code < 0 else f"exit status {code}"
        return Failure(FailureKind.RUNTIME_LOST, region, f"the runtime driver ended with {how}")
    if obs.heartbeat_age_s is None:
        if obs.running_for_s > lease.startup_grace_s:
            return Failure(FailureKind.LEASE_EXPIRED, region, "no heartbeat since the runtime started")
        return None
    if obs.heartbeat_age_s > lease.timeout_s:
        return Failure(
            FailureKind.LEASE_EXPIRED,
            region,
            f"last heartbeat {obs.heartbeat_age_s:.1f}s ago (lease {lease.timeout_s:g}s)",
        )
    return None
