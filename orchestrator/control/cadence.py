"""How often the controller's watch looks at a running attempt. Pure.

The watch wakes every ``POLL_S`` (orchestrator/control/watch.py) for what is cheap and must be
seen at once: the runtime's exit (a wait on the controller's own child, or on the ssh
following it), the chaos rendezvous the workers wait on, the worker nodes. A *look*
(the control channel's events, progress and heartbeat, the provider's health check,
the standby, live logs) costs file reads, a listing that grows with the run, and on
the local provider a TCP connect; it is what kept the controller at 2% of a core. A
look that finds nothing to follow closely lets the next one wait twice as many
wakeups, up to ``cap_ticks``; anything else brings the next look back to the next
wakeup.

The cap keeps detection within two heartbeat intervals: it is at most one interval
(``look_cap_ticks``), a heartbeat one beat late makes every wakeup a look (so a lease
that expires is seen within one wakeup of it), and a runtime that exits is seen on
the wakeup after it did.
"""

from __future__ import annotations

from collections.abc import Iterable

from recovery.detection import Health, Lease, Observation

# The most wakeups between two looks while all is quiet: 1 s at the watch's 0.2 s.
MAX_LOOK_TICKS = 5
# Events every healthy run writes at each report or checkpoint: seen at the next look,
# however long it waits. Any other kind (a restart, an error, a fallback, a notice)
# brings the looks back to every wakeup.
ROUTINE_EVENTS = frozenset({"losses", "replicated"})


def look_cap_ticks(heartbeat_interval_s: float, poll_s: float, most: int = MAX_LOOK_TICKS) -> int:
    """The most wakeups between two looks: ``most``, and never more than fit in one
    heartbeat interval (at least 1: every wakeup a look)."""
    if poll_s <= 0:
        return 1
    fit = int(heartbeat_interval_s / poll_s + 1e-9)
    return max(1, min(most, fit))


def heartbeat_late(heartbeat_age_s: float | None, lease: Lease) -> bool:
    """A beat missed: older than two heartbeat intervals. None (no heartbeat yet) is not
    late: the driver is starting, and the lease's start-up grace is long."""
    return heartbeat_age_s is not None and heartbeat_age_s > 2 * lease.interval_s


def quiet(obs: Observation, lease: Lease, new_events: Iterable[str], fired: bool = False) -> bool:
    """Whether a look found nothing the next one must follow closely: the runtime runs,
    the cluster is UP with no failed check in the streak, the heartbeat is on time, no
    chaos fault fired, and every new event is a routine one."""
    if fired or obs.runtime_exit is not None or obs.user_error is not None or obs.nodes_short is not None:
        return False
    if obs.health is not Health.UP or obs.failed_checks > 0:
        return False
    if heartbeat_late(obs.heartbeat_age_s, lease):
        return False
    return all(kind in ROUTINE_EVENTS for kind in new_events)


def next_look_ticks(prev: int, calm: bool, cap: int) -> int:
    """Wakeups until the next look: 1 after a look that was not ``calm``; otherwise twice
    the previous wait, up to ``cap``."""
    if not calm:
        return 1
    return max(1, min(cap, prev * 2))
