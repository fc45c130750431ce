"""Which metric points reach the tracker: the pure decision, step by step, through the
failovers a run meets (a restore from the newest commit, from an older replica, a
resume that reports its series again, a run that never commits)."""

from __future__ import annotations

import pytest

from orchestrator.tracking.series import (
    Committed,
    Ended,
    Offered,
    Point,
    Restored,
    Series,
    advance,
    resumed,
)

pytestmark = pytest.mark.unit


def pts(key: str, steps: range, value: float = 1.0) -> Offered:
    return Offered(tuple(Point(key, s, value + s) for s in steps))


def run(*happenings: object, series: Series | None = None, max_pending: int = 100_000) -> tuple[Series, list[Point]]:
    s, out = series or Series(), []
    for what in happenings:
        s, now = advance(s, what, max_pending)  # type: ignore[arg-type]
        out.extend(now)
    return s, out


def steps(points: list[Point], key: str = "loss") -> list[int]:
    return [p.step for p in points if p.key == key]


def test_points_wait_for_the_checkpoint_that_covers_them() -> None:
    s, out = run(pts("loss", range(1, 11)))
    assert out == [] and len(s.pending) == 10
    s, out = advance(s, Committed(5))
    assert steps(list(out)) == [1, 2, 3, 4, 5]
    assert s.written["loss"] == 5 and steps(list(s.pending)) == [6, 7, 8, 9, 10]


def test_points_under_the_newest_commit_go_at_once() -> None:
    _, out = run(Committed(20), pts("loss", range(18, 23)))
    assert steps(out) == [18, 19, 20]


def test_a_failover_drops_the_lost_steps_and_the_retrained_values_are_the_only_ones() -> None:
    _, out = run(
        pts("loss", range(1, 31), 1.0),
        Committed(20),
        Restored(20),  # the region is lost at step 30: restored from 20
        pts("loss", range(21, 41), 100.0),  # 21..40 trained again, other values
        Committed(40),
        Ended(),
    )
    assert steps(out) == list(range(1, 41))  # each step once, in order
    assert {p.step: p.value for p in out}[25] == 125.0  # the retrained value, not the lost one


def test_a_restore_from_an_older_replica_never_writes_a_step_twice() -> None:
    _, out = run(
        pts("loss", range(1, 31)),
        Committed(30),  # 1..30 written
        Restored(20),  # the new region's replica is at 20
        pts("loss", range(21, 41), 500.0),
        Committed(40),
    )
    assert steps(out) == list(range(1, 41))
    assert {p.step: p.value for p in out}[25] == 26.0  # the first written stays


def test_two_failovers_each_one_series_per_key() -> None:
    _, out = run(
        pts("loss", range(1, 16)),
        pts("steps_per_s", range(5, 16, 5)),
        Committed(10),
        Restored(10),
        pts("loss", range(11, 26)),
        pts("steps_per_s", range(15, 26, 5)),
        Committed(20),
        Restored(20),
        pts("loss", range(21, 31)),
        Ended(),
    )
    for key in ("loss", "steps_per_s"):
        assert steps(out, key) == sorted(set(steps(out, key)))
    assert steps(out) == list(range(1, 31))
    assert steps(out, "steps_per_s") == [5, 10, 15, 20]  # 25 was lost with the second failover


def test_a_resumed_series_skips_what_the_tracker_has() -> None:
    s = resumed({"loss": 12})
    _, out = run(pts("loss", range(1, 21)), Committed(20), series=s)
    assert steps(out) == list(range(13, 21))


def test_the_same_step_reported_again_while_waiting_keeps_the_newest() -> None:
    _, out = run(Offered((Point("loss", 3, 1.0),)), Offered((Point("loss", 3, 2.0),)), Ended())
    assert [(p.step, p.value) for p in out] == [(3, 2.0)]


def test_the_end_lets_everything_out_and_a_restart_from_scratch_drops_everything() -> None:
    _, out = run(pts("loss", range(1, 6)), Restored(0), pts("loss", range(1, 4), 9.0), Ended())
    assert [(p.step, p.value) for p in out] == [(1, 10.0), (2, 11.0), (3, 12.0)]


def test_a_run_that_never_commits_is_bounded_by_letting_the_oldest_out() -> None:
    s, out = run(pts("loss", range(1, 11)), max_pending=4)
    assert steps(out) == [1, 2, 3, 4, 5, 6] and len(s.pending) == 4


def test_points_come_out_by_step_then_key() -> None:
    _, out = run(pts("b", range(1, 3)), pts("a", range(1, 3)), Ended())
    assert [(p.step, p.key) for p in out] == [(1, "a"), (1, "b"), (2, "a"), (2, "b")]
