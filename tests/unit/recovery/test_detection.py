"""classify(): from one observation of an attempt to what failed, or None; the health
checks' hysteresis (a definitive answer, or failed checks with the lease stale); and
when a connection to the runtime that ended is re-attached rather than taken as its end."""

from __future__ import annotations

import pytest

from recovery.detection import (
    EXIT_INFRA,
    EXIT_OK,
    EXIT_PREEMPTED,
    EXIT_USER_ERROR,
    EXIT_WORKERS_EXHAUSTED,
    FailureKind,
    Health,
    Lease,
    Observation,
    classify,
    cluster_lost,
    confirm_health,
    health_glitch,
    may_reattach,
    user_error_line,
    user_error_signature,
)

LEASE = Lease(interval_s=1.0, timeout_s=10.0, startup_grace_s=120.0, failures_to_lose=3)
UP, NOT_UP, GONE = Health.UP, Health.NOT_UP, Health.GONE
REGION = "local-a"


def obs(
    runtime_exit: int | None = None,
    health: Health = UP,
    heartbeat_age_s: float | None = 0.5,
    running_for_s: float = 30.0,
    user_error: str | None = None,
    failed_checks: int | None = None,
) -> Observation:
    failed = (0 if health is UP else 1) if failed_checks is None else failed_checks
    return Observation(runtime_exit, health, heartbeat_age_s, running_for_s, user_error, failed)


def kind_of(o: Observation) -> FailureKind | None:
    f = classify(o, REGION, LEASE)
    if f is not None:
        assert f.region == REGION
    return None if f is None else f.kind


def test_healthy_running_attempt_is_not_a_failure() -> None:
    assert classify(obs(), REGION, LEASE) is None


def test_clean_exit_is_not_a_failure_even_once_the_cluster_is_torn_down() -> None:
    assert classify(obs(runtime_exit=EXIT_OK, health=GONE), REGION, LEASE) is None


def test_user_error_event_wins_over_a_lost_cluster_and_an_exit_code() -> None:
    f = classify(obs(runtime_exit=-9, health=GONE, user_error="ValueError: bad"), REGION, LEASE)
    assert f is not None
    assert (f.kind, f.detail) == (FailureKind.USER_ERROR, "ValueError: bad")


def test_a_user_error_names_the_users_file_and_line_and_its_step_and_carries_its_signature() -> None:
    o = Observation(None, UP, 0.5, 30.0, "ValueError: bad", user_error_step=12, user_error_site="/proj/m.py:46")
    f = classify(o, REGION, LEASE)
    assert f is not None and f.kind is FailureKind.USER_ERROR
    assert f.detail == "ValueError: bad at /proj/m.py:46 in step 12"
    assert f.signature == user_error_signature("ValueError: bad", 12) != ""


def test_a_user_error_signature_is_its_step_and_message() -> None:
    sig = user_error_signature("ValueError: bad", 12)
    assert sig == user_error_signature("ValueError: bad", 12)
    assert sig != user_error_signature("ValueError: bad", 13)
    assert sig != user_error_signature("ValueError: worse", 12)
    assert user_error_signature("ValueError: bad", None) == ""


def test_a_user_error_line_says_before_the_first_step_for_step_0_and_leaves_out_what_is_not_known() -> None:
    assert user_error_line("E: x", 0, "m.py:3") == "E: x at m.py:3 before the first step"
    assert user_error_line("E: x", None, None) == "E: x"


def test_a_cluster_gone_for_sure_is_cluster_lost() -> None:
    assert kind_of(obs(runtime_exit=-9, health=GONE)) is FailureKind.CLUSTER_LOST
    assert kind_of(obs(health=GONE)) is FailureKind.CLUSTER_LOST


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
        obs(runtime_exit=-9, health=GONE),  # already known lost
        obs(runtime_exit=-9, health=NOT_UP),  # lost already: the driver died with the check not UP
        obs(runtime_exit=-9, user_error="ValueError: boom"),
    ],
)
def test_no_second_look_where_the_verdict_does_not_hang_on_the_cluster(o: Observation) -> None:
    assert not confirm_health(o)


# --- hysteresis: what is a lost cluster, what a glitch ---------------------------------------


def test_one_check_not_up_with_fresh_heartbeats_is_a_glitch_and_nothing_more() -> None:
    o = obs(health=NOT_UP)
    assert classify(o, REGION, LEASE) is None
    assert health_glitch(o, LEASE) and cluster_lost(o, LEASE) is None


@pytest.mark.parametrize("failed", [1, 3, 50])
def test_any_number_of_failed_checks_with_fresh_heartbeats_is_no_loss(failed: int) -> None:
    # The runtime renews its lease: the cluster it runs on is there, whatever the provider says.
    o = obs(health=NOT_UP, failed_checks=failed, heartbeat_age_s=9.9)
    assert classify(o, REGION, LEASE) is None and health_glitch(o, LEASE)


def test_a_definitive_answer_is_a_loss_at_once_even_with_fresh_heartbeats() -> None:
    o = obs(health=GONE, heartbeat_age_s=0.1)
    assert kind_of(o) is FailureKind.CLUSTER_LOST
    assert not health_glitch(o, LEASE)


def test_failed_checks_below_the_count_with_the_lease_stale_are_a_lease_expiry() -> None:
    assert kind_of(obs(health=NOT_UP, failed_checks=2, heartbeat_age_s=10.5)) is FailureKind.LEASE_EXPIRED


def test_the_count_of_failed_checks_with_the_lease_stale_is_a_lost_cluster() -> None:
    f = classify(obs(health=NOT_UP, failed_checks=3, heartbeat_age_s=10.5), REGION, LEASE)
    assert f is not None and f.kind is FailureKind.CLUSTER_LOST
    assert f.detail.startswith("3 health checks in a row not UP")
    # recovery.health_failures_to_lose sets the count.
    one = Lease(1.0, 10.0, failures_to_lose=1)
    f = classify(obs(health=NOT_UP, failed_checks=1, heartbeat_age_s=10.5), REGION, one)
    assert f is not None and f.kind is FailureKind.CLUSTER_LOST


def test_no_heartbeat_ever_counts_as_stale_only_past_the_start_up_grace() -> None:
    starting = obs(health=NOT_UP, failed_checks=5, heartbeat_age_s=None, running_for_s=60.0)
    assert classify(starting, REGION, LEASE) is None and health_glitch(starting, LEASE)
    late = obs(health=NOT_UP, failed_checks=5, heartbeat_age_s=None, running_for_s=121.0)
    assert kind_of(late) is FailureKind.CLUSTER_LOST


@pytest.mark.parametrize("code", [-9, EXIT_INFRA, EXIT_WORKERS_EXHAUSTED])
def test_a_driver_dead_with_the_cluster_not_up_is_a_lost_cluster_without_waiting(code: int) -> None:
    o = obs(runtime_exit=code, health=NOT_UP, failed_checks=1)
    assert kind_of(o) is FailureKind.CLUSTER_LOST and not health_glitch(o, LEASE)


@pytest.mark.parametrize(("code", "kind"), [(EXIT_USER_ERROR, "user_error"), (EXIT_PREEMPTED, "preempted")])
def test_a_driver_that_ended_with_its_own_verdict_keeps_it_over_a_check_not_up(code: int, kind: str) -> None:
    assert kind_of(obs(runtime_exit=code, health=NOT_UP)) == kind


def test_a_glitch_is_only_a_check_not_up() -> None:
    assert not health_glitch(obs(), LEASE)
    assert not health_glitch(obs(health=GONE), LEASE)


# --- a connection to the runtime that ended ---------------------------------------------------


def test_a_connection_that_ended_without_the_runtimes_word_while_heartbeats_are_fresh_is_reattached() -> None:
    assert may_reattach(None, 0.5, LEASE)
    assert may_reattach(None, 10.0, LEASE)  # the lease's last moment still vouches


@pytest.mark.parametrize(
    ("word", "age"),
    [
        (0, 0.5),  # the runtime said it ended: its status stands
        (-9, 0.5),
        (None, 10.5),  # no heartbeat within the lease: the connection's status is the runtime's
        (None, None),  # no heartbeat yet: nothing says it is alive
    ],
)
def test_the_runtimes_word_or_a_stale_lease_make_the_connections_end_the_runtimes(
    word: int | None, age: float | None
) -> None:
    assert not may_reattach(word, age, LEASE)
