"""classify(): from one observation of an attempt to what failed, or None."""

from __future__ import annotations

import pytest

from recovery.detection import (
    EXIT_INFRA,
    EXIT_OK,
    EXIT_PREEMPTED,
    EXIT_USER_ERROR,
    EXIT_WORKERS_EXHAUSTED,
    FailureKind,
    Lease,
    Observation,
    classify,
    confirm_health,
)

LEASE = Lease(interval_s=1.0, timeout_s=10.0, startup_grace_s=120.0)
REGION = "local-a"


def obs(
    runtime_exit: int | None = None,
    cluster_healthy: bool = True,
    heartbeat_age_s: float | None = 0.5,
    running_for_s: float = 30.0,
    user_error: str | None = None,
) -> Observation:
    return Observation(runtime_exit, cluster_healthy, heartbeat_age_s, running_for_s, user_error)


def kind_of(o: Observation) -> FailureKind | None:
    f = classify(o, REGION, LEASE)
    if f is not None:
        assert f.region == REGION
    return None if f is None else f.kind


def test_healthy_running_attempt_is_not_a_failure() -> None:
    assert classify(obs(), REGION, LEASE) is None


def test_clean_exit_is_not_a_failure_even_once_the_cluster_is_torn_down() -> None:
    assert classify(obs(runtime_exit=EXIT_OK, cluster_healthy=False), REGION, LEASE) is None


def test_user_error_event_wins_over_a_lost_cluster_and_an_exit_code() -> None:
    f = classify(obs(runtime_exit=-9, cluster_healthy=False, user_error="ValueError: bad"), REGION, LEASE)
    assert f is not None
    assert (f.kind, f.detail) == (FailureKind.USER_ERROR, "ValueError: bad")


def test_unhealthy_cluster_is_cluster_lost() -> None:
    assert kind_of(obs(runtime_exit=-9, cluster_healthy=False)) is FailureKind.CLUSTER_LOST
    assert kind_of(obs(cluster_healthy=False)) is FailureKind.CLUSTER_LOST


def test_runtime_killed_by_a_signal_on_a_healthy_cluster_is_runtime_lost_naming_the_signal() -> None:
    f = classify(obs(runtime_exit=-9), REGION, LEASE)
    assert f is not None
    assert f.kind is FailureKind.RUNTIME_LOST
    assert "signal 9" in f.detail


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (3, FailureKind.USER_ERROR),
        (4, FailureKind.WORKERS_EXHAUSTED),
        (5, FailureKind.RUNTIME_LOST),
    ],
)
def test_runtime_exit_codes_3_4_and_5_are_user_error_workers_exhausted_and_runtime_lost(
    code: int, kind: FailureKind
) -> None:
    assert kind_of(obs(runtime_exit=code)) is kind


def test_heartbeat_older_than_the_lease_is_lease_expired() -> None:
    f = classify(obs(heartbeat_age_s=10.5), REGION, LEASE)
    assert f is not None
    assert f.kind is FailureKind.LEASE_EXPIRED
    assert "10.5s" in f.detail


def test_heartbeat_within_the_lease_is_healthy() -> None:
    assert classify(obs(heartbeat_age_s=9.9), REGION, LEASE) is None


def test_no_heartbeat_yet_within_the_startup_grace_is_healthy() -> None:
    assert classify(obs(heartbeat_age_s=None, running_for_s=119.0), REGION, LEASE) is None


def test_no_heartbeat_beyond_the_startup_grace_is_lease_expired() -> None:
    assert kind_of(obs(heartbeat_age_s=None, running_for_s=121.0)) is FailureKind.LEASE_EXPIRED


@pytest.mark.parametrize("code", [-9, -15, EXIT_INFRA, EXIT_WORKERS_EXHAUSTED])
def test_a_driver_dead_on_a_healthy_looking_cluster_has_the_cluster_looked_at_again(code: int) -> None:
    # The driver dies with its node first: read at once, a lost region passes for a lost driver.
    assert confirm_health(obs(runtime_exit=code))


@pytest.mark.parametrize(
    "o",
    [
        obs(runtime_exit=None),  # still running
        obs(runtime_exit=EXIT_OK),
        obs(runtime_exit=EXIT_PREEMPTED),  # its own verdict, whatever the cluster does next
        obs(runtime_exit=EXIT_USER_ERROR),
        obs(runtime_exit=-9, cluster_healthy=False),  # already known lost
        obs(runtime_exit=-9, user_error="ValueError: boom"),
    ],
)
def test_no_second_look_where_the_verdict_does_not_hang_on_the_cluster(o: Observation) -> None:
    assert not confirm_health(o)
