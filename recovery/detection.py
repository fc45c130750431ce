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
    CLUSTER_LOST = "cluster_lost"  # gone for sure, or failing its health checks with no heartbeat
    LEASE_EXPIRED = "lease_expired"  # no heartbeat within the lease: hung or partitioned
    RUNTIME_LOST = "runtime_lost"  # the driver died, the cluster is still up
    USER_ERROR = "user_error"  # the workload raised
    PREEMPTED = "preempted"  # a preemption notice, honoured: checkpointed and stopped
    CONTROLLER_LOST = "controller_lost"  # the controller died; a resumed one found this attempt gone
    WORKERS_EXHAUSTED = "workers_exhausted"  # Ray Train used up its in-place restarts
    # A worker node lost, not replaced in time, and too few workers left (trainer.min_workers).
    NODE_LOST = "node_lost"
    NO_CAPACITY = "no_capacity"  # provisioning: try another region
    PROVISION_ERROR = "provision_error"  # provisioning: a transient error, retries used up
    PROVISION_TIMEOUT = "provision_timeout"  # provisioning: not up within recovery.provision_timeout_s
    PRECHECK = "precheck"  # provisioning: credentials or config; retrying cannot help
    # The runtime exited 0, but no signed checkpoint of the run backs what it claimed
    # (orchestrator/control/proof.py): the region's writes are not to be trusted; fail over.
    OUTCOME_UNPROVEN = "outcome_unproven"


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    region: str
    detail: str = ""
    # A user error's identity (``user_error_signature``): the same one again after an
    # in-place restart is a deterministic bug. Empty when the step is not known.
    signature: str = ""
    # A user error raised again when its step was run once more in the same process: a
    # bug, known to be one before any restart.
    repeats: bool = False


def user_error_signature(error: str, step: int | None) -> str:
    """What makes two user errors the same one: the step the workload raised at and a
    digest of its exception's type and message. Empty (never the same as another) when
    the step is not known: a Ray Train function's steps are its own."""
    if step is None:
        return ""
    import hashlib

    return f"{step}:{hashlib.sha256(error.encode()).hexdigest()[:16]}"


def user_error_line(error: str, step: int | None, site: str | None) -> str:
    """A user error in one line: the exception, the user's file and line, the step."""
    at = f" at {site}" if site else ""
    when = "" if step is None else (" before the first step" if step == 0 else f" in step {step}")
    return f"{error}{at}{when}"


class Health(StrEnum):
    """A provider's answer about a cluster. Only GONE is a verdict on its own."""

    UP = "up"
    # Not UP, or the provider could not tell (its call failed): a glitch while the
    # runtime's heartbeats are fresh, a loss once they stop and it lasts.
    NOT_UP = "not_up"
    # Definitive: the provider's record is gone or terminated, the Slurm allocation is
    # gone from squeue, the head's process has ended.
    GONE = "gone"


@dataclass(frozen=True)
class HealthCheck:
    health: Health
    # When the provider looked: an answer it kept from an earlier look keeps that
    # look's time, so one failed look is counted once however often it is read.
    at: float
    detail: str = ""


@dataclass(frozen=True)
class Observation:
    """One look at a running attempt."""

    runtime_exit: int | None  # None while the driver runs (or its connection is re-attached)
    health: Health
    heartbeat_age_s: float | None  # None before the first heartbeat
    running_for_s: float  # since the runtime started
    user_error: str | None = None  # a user_error event from the workers
    failed_checks: int = 0  # consecutive health checks not UP, the newest included
    # Why the region can no longer train: nodes lost, not replaced, too few workers left.
    nodes_short: str | None = None
    # The user error's step (0: before the first) and the user's file:line, when known.
    user_error_step: int | None = None
    user_error_site: str | None = None
    # The user error was raised again when its step was run once more in its process.
    user_error_repeats: bool = False


@dataclass(frozen=True)
class Lease:
    interval_s: float
    timeout_s: float
    # Before the first heartbeat the driver is still starting (imports, Ray connect).
    startup_grace_s: float = 120.0
    # recovery.health_failures_to_lose: failed health checks in a row that, with the
    # lease stale, are a lost cluster (fewer are glitches).
    failures_to_lose: int = 3


def lease_stale(obs: Observation, lease: Lease) -> bool:
    """No heartbeat within the lease (or none at all past the start-up grace)."""
    if obs.heartbeat_age_s is None:
        return obs.running_for_s > lease.startup_grace_s
    return obs.heartbeat_age_s > lease.timeout_s


def died_unexpectedly(code: int | None) -> bool:
    """The driver ended without a verdict of its own (a signal, an infra exit)."""
    return code is not None and code not in (EXIT_OK, EXIT_USER_ERROR, EXIT_PREEMPTED)


def cluster_lost(obs: Observation, lease: Lease) -> str | None:
    """Why the cluster is lost, or None. A definitive answer is a loss at once; a
    check that is not UP (or failed) is one only with the driver dead, or after
    ``lease.failures_to_lose`` of them in a row with the heartbeat lease stale."""
    if obs.health is Health.GONE:
        return "the provider says the cluster is gone"
    if obs.health is Health.UP:
        return None
    if died_unexpectedly(obs.runtime_exit):
        return "the runtime driver died and the cluster's health check is not UP"
    if obs.failed_checks >= lease.failures_to_lose and lease_stale(obs, lease):
        return f"{obs.failed_checks} health checks in a row not UP, and no heartbeat within the lease"
    return None


def health_glitch(obs: Observation, lease: Lease) -> bool:
    """A health check that is not UP and, on its own, nothing more: journaled, not acted on."""
    return obs.health is Health.NOT_UP and cluster_lost(obs, lease) is None


def may_reattach(exit_word: int | None, heartbeat_age_s: float | None, lease: Lease) -> bool:
    """The controller's connection to the runtime (the ssh session following it; on the
    local provider its process handle) ended: is that maybe the connection's end alone?
    The runtime's own word on the control channel (its exit status, written last) says
    it ended; without one, a fresh heartbeat says it may be training still: follow it
    anew rather than restart it. Before the first heartbeat, or with the lease stale,
    the connection's status is taken as the runtime's."""
    return exit_word is None and heartbeat_age_s is not None and heartbeat_age_s <= lease.timeout_s


def node_lost(health: Health, streak: int, failures_to_lose: int) -> bool:
    """A worker node is lost when its processes ended (GONE), or when it was not UP for
    ``failures_to_lose`` looks in a row (a hung node: stopped, not answering). Its
    region goes on: the head's health is the cluster's, judged by ``cluster_lost``."""
    return health is Health.GONE or (health is Health.NOT_UP and streak >= failures_to_lose)


# A driver that dies with its node dies first: the node's own signs of death (the
# head's process reaped, its port closed) lag by a moment, longer under load.
HEALTH_SETTLE_S = 2.0


def confirm_health(obs: Observation) -> bool:
    """Whether a healthy-looking cluster must be looked at again before ``classify``.

    The driver died unexpectedly (a signal, an infra exit) while its cluster still
    looked healthy: read at once, a region lost with everything on it passes for a
    lost driver, and the run restarts in the region it should leave.
    """
    return died_unexpectedly(obs.runtime_exit) and obs.health is Health.UP and obs.user_error is None


def classify(obs: Observation, region: str, lease: Lease) -> Failure | None:
    """What failed, or None while the attempt looks healthy (or has succeeded)."""
    if obs.runtime_exit == EXIT_OK:
        return None
    if obs.user_error is not None:
        return Failure(
            FailureKind.USER_ERROR,
            region,
            user_error_line(obs.user_error, obs.user_error_step, obs.user_error_site),
            user_error_signature(obs.user_error, obs.user_error_step),
            repeats=obs.user_error_repeats,
        )
    lost = cluster_lost(obs, lease)
    if lost is not None:
        return Failure(FailureKind.CLUSTER_LOST, region, lost)
    if obs.nodes_short is not None:
        return Failure(FailureKind.NODE_LOST, region, obs.nodes_short)
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
