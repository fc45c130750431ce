"""The watch's cadence: looks that thin out while an attempt is quiet and come back at
once for anything else, and what makes a look quiet (orchestrator/control/cadence.py). The
watch's loop keeping to it is test_watch.py's."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.control.cadence import MAX_LOOK_TICKS, heartbeat_late, look_cap_ticks, next_look_ticks, quiet
from recovery.detection import EXIT_OK, Health, Lease, Observation

pytestmark = pytest.mark.unit

LEASE = Lease(interval_s=1.0, timeout_s=10.0, failures_to_lose=3)


def _obs(**kw: Any) -> Observation:
    fields: dict[str, Any] = {"runtime_exit": None, "health": Health.UP, "heartbeat_age_s": 0.4, "running_for_s": 30.0}
    return Observation(**{**fields, **kw})


# --- the pure parts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "poll", "cap"),
    [(1.0, 0.2, 5), (30.0, 0.2, MAX_LOOK_TICKS), (0.5, 0.2, 2), (0.1, 0.2, 1), (0.05, 0.002, 5), (1.0, 0.0, 1)],
)
def test_the_longest_wait_between_looks_fits_in_one_heartbeat_interval(interval: float, poll: float, cap: int) -> None:
    assert look_cap_ticks(interval, poll) == cap
    # What keeps detection within two intervals: a lease expiring just after a look is
    # seen at most one interval later (sooner: a late heartbeat makes every wakeup a look).
    assert cap * poll <= max(interval, poll)


def test_quiet_looks_double_the_wait_up_to_the_cap_and_anything_else_brings_it_back() -> None:
    waits, wait = [], 1
    for calm in [True, True, True, True, False, True]:
        wait = next_look_ticks(wait, calm, cap=5)
        waits.append(wait)
    assert waits == [2, 4, 5, 5, 1, 2]
    assert next_look_ticks(4, True, cap=1) == 1


def test_routine_reports_are_quiet_and_every_other_event_is_not() -> None:
    assert quiet(_obs(), LEASE, [])
    assert quiet(_obs(), LEASE, ["losses", "replicated", "replicated"])
    for kind in ("train_started", "user_error", "store_fallback", "preemption_notice", "fenced_write", "runtime_error"):
        assert not quiet(_obs(), LEASE, ["replicated", kind]), kind


@pytest.mark.parametrize(
    "obs",
    [
        _obs(runtime_exit=EXIT_OK),
        _obs(runtime_exit=-9),
        _obs(health=Health.NOT_UP, failed_checks=1),
        _obs(health=Health.GONE),
        _obs(failed_checks=1),  # a streak the newest check has not ended yet
        _obs(heartbeat_age_s=2.5),  # a beat missed: the lease may expire soon
        _obs(user_error="ValueError: boom"),
        _obs(nodes_short="node(s) [1] lost"),
    ],
)
def test_a_look_at_anything_that_may_end_the_attempt_is_not_quiet(obs: Observation) -> None:
    assert not quiet(obs, LEASE, [])


def test_a_fired_fault_is_not_quiet_and_no_heartbeat_yet_is_not_late() -> None:
    assert not quiet(_obs(), LEASE, [], fired=True)
    assert quiet(_obs(heartbeat_age_s=None), LEASE, [])
    assert not heartbeat_late(None, LEASE) and not heartbeat_late(2.0, LEASE) and heartbeat_late(2.01, LEASE)


# --- the watch's loop keeps to it ----------------------------------------------------------------


# --- the cheaper paths under it -------------------------------------------------------------------
