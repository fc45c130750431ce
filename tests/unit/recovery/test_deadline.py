"""Deadlines on spot: when a run leaves spot for on-demand, greedy and Uniform Progress."""

from __future__ import annotations

import pytest

from recovery.deadline import must_go_on_demand, slack_s, uniform_line, wants_on_demand

pytestmark = pytest.mark.unit

H = 3600.0


def test_the_slack_is_the_time_left_less_the_training_left() -> None:
    assert slack_s(deadline_at=10 * H, now=4 * H, remaining_work_s=5 * H) == 1 * H
    assert slack_s(10 * H, 4 * H, -1.0) == 6 * H


def test_a_run_goes_on_demand_once_one_more_loss_and_restart_could_eat_its_slack() -> None:
    # At worst: the lost attempt's 0.2 h restart, a whole 0.5 h interval, a 0.2 h restart again.
    assert not must_go_on_demand(0.9 * H, 0.2 * H, 0.5 * H)
    assert must_go_on_demand(0.89 * H, 0.2 * H, 0.5 * H)


def _wants(policy: str, done_h: float, elapsed_h: float, now: bool = False) -> bool:
    return wants_on_demand(
        policy,
        done_s=done_h * H,
        work_s=8 * H,
        elapsed_s=elapsed_h * H,
        allowed_s=12 * H,
        restart_s=0.1 * H,
        interval_s=0.5 * H,
        on_demand_now=now,
    )


def test_greedy_stays_on_spot_until_the_slack_runs_out() -> None:
    assert not _wants("greedy", done_h=1.0, elapsed_h=4.0)  # 3 h of slack
    assert _wants("greedy", done_h=1.0, elapsed_h=4.4)  # 0.6 h: less than a loss and restart (0.7 h)


def test_uniform_progress_goes_on_demand_behind_its_line_and_back_a_restart_ahead() -> None:
    # The line: nothing in the first restart, then 8 h of work by hour 12.
    assert uniform_line(8 * H, 0.1 * H, 12 * H, 0.1 * H) == 0
    assert uniform_line(8 * H, 12 * H, 12 * H, 0.1 * H) == 8 * H
    line_at_6 = 8 * (6 - 0.1) / (12 - 0.1)
    assert _wants("uniform_progress", done_h=line_at_6 - 0.01, elapsed_h=6.0)
    assert not _wants("greedy", done_h=line_at_6 - 0.01, elapsed_h=6.0)
    assert not _wants("uniform_progress", done_h=line_at_6 + 0.01, elapsed_h=6.0)
    # On on-demand, it comes back to spot only a restart's worth ahead of the line.
    assert _wants("uniform_progress", done_h=line_at_6 + 0.05, elapsed_h=6.0, now=True)
    assert not _wants("uniform_progress", done_h=line_at_6 + 0.11, elapsed_h=6.0, now=True)
