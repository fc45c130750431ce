"""Deadlines on spot capacity: when a run must leave spot for on-demand. Pure.

A run with a deadline has ``slack``: the time left before it, less the training left.
One more loss on spot costs, at worst, the attempt's restart (provisioning, start-up,
restore) and a whole checkpoint interval of work, and then the restart that resumes it.
``must_go_on_demand``: the slack would not absorb one more loss and restart, so the run
finishes on capacity that is not reclaimed.

``uniform_progress``: Uniform Progress (Wu et al., "Can't Be Late", NSDI '24) also
moves to on-demand whenever the run is behind the straight line from its start to its
deadline (progress below work x elapsed / allowed), and back to spot once ahead, with
the slack rule above as its safety net. ``greedy`` uses the slack rule alone.
"""

from __future__ import annotations


def slack_s(deadline_at: float, now: float, remaining_work_s: float) -> float:
    """Seconds to spare: the time left before the deadline less the training left."""
    return deadline_at - now - max(0.0, remaining_work_s)


def loss_and_restart_s(restart_s: float, interval_s: float) -> float:
    """The most one more loss on spot costs: the lost attempt's restart and a whole
    interval of work, then the restart that resumes it."""
    return 2 * max(0.0, restart_s) + max(0.0, interval_s)


def must_go_on_demand(slack: float, restart_s: float, interval_s: float) -> bool:
    """Whether one more loss and restart could eat the slack."""
    return slack < loss_and_restart_s(restart_s, interval_s)


def uniform_line(work_s: float, elapsed_s: float, allowed_s: float, restart_s: float) -> float:
    """The progress Uniform Progress expects by ``elapsed_s``: none during the first start-up
    (``restart_s``), then a straight line to all the work at the deadline."""
    span = allowed_s - max(0.0, restart_s)
    if span <= 0:
        return work_s
    return work_s * min(1.0, max(0.0, elapsed_s - max(0.0, restart_s)) / span)


def wants_on_demand(
    policy: str,
    *,
    done_s: float,
    work_s: float,
    elapsed_s: float,
    allowed_s: float,
    restart_s: float,
    interval_s: float,
    on_demand_now: bool = False,
) -> bool:
    """``greedy`` or ``uniform_progress``: whether the run should train on on-demand now.
    Uniform Progress leaves on-demand for spot again only once it is a restart's worth of
    work ahead of its line (each switch costs a restart)."""
    slack = slack_s(allowed_s, elapsed_s, work_s - done_s)
    if must_go_on_demand(slack, restart_s, interval_s):
        return True
    if policy != "uniform_progress":
        return False
    line = uniform_line(work_s, elapsed_s, allowed_s, restart_s)
    margin = max(0.0, restart_s) if on_demand_now else 0.0
    return done_s < line + margin
