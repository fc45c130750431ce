"""A standby pool's decisions (recovery/pool.py): when to launch, whose share, who waits."""

from __future__ import annotations

import pytest

from recovery.pool import (
    GONE,
    LAUNCHING,
    READY,
    TAKEN,
    Entry,
    Member,
    entry_of,
    member_of,
    others_waiting,
    pool_key,
    share_s,
    standing,
    wants_launch,
)

pytestmark = pytest.mark.unit

CLUSTER = {"name": "r-b-g2", "region": "b", "provider": "local", "address": "127.0.0.1:1", "info": {}}


def test_a_pool_launches_when_it_has_nothing_or_its_standby_was_taken_gone_or_its_launch_is_overdue() -> None:
    assert wants_launch(None, 10.0)
    assert wants_launch(Entry(3, TAKEN, "r1", 5.0, cluster=CLUSTER), 10.0)
    assert wants_launch(Entry(3, GONE, "r1", 5.0), 10.0)
    assert wants_launch(Entry(1, LAUNCHING, "r1", 0.0, expires_at=9.0), 10.0)
    assert not wants_launch(Entry(1, LAUNCHING, "r1", 0.0, expires_at=11.0), 10.0)
    assert not wants_launch(Entry(2, READY, "r1", 1.0, cluster=CLUSTER), 10.0)


def test_the_standby_an_end_ended_is_the_newest_ready_entry() -> None:
    entries = [
        Entry(1, LAUNCHING, "r1", 0.0, expires_at=100.0),
        Entry(2, READY, "r1", 5.0, cluster={**CLUSTER, "name": "old"}),
        Entry(3, TAKEN, "r2", 8.0, cluster=CLUSTER),
        Entry(4, LAUNCHING, "r1", 9.0, expires_at=100.0),
        Entry(5, READY, "r1", 12.0, cluster=CLUSTER),
        Entry(6, GONE, "r1", 20.0),
    ]
    found = standing(entries)
    assert found is not None and found.seq == 5
    assert standing(entries[:1]) is None


def test_an_entry_reads_back_as_written_and_a_malformed_one_is_named() -> None:
    entry = Entry(4, READY, "r1", 12.0, cluster=CLUSTER, launched_at=9.0)
    assert entry_of(entry.body(), 4) == entry
    assert "entry 4, not 5" in str(entry_of(entry.body(), 5))
    assert entry_of({**entry.body(), "state": "borrowed"}, 4) == "is not a pool entry"
    assert entry_of({"seq": 1, "state": LAUNCHING, "run_id": "r", "at": 1.0}, 1) == "is a launch without a deadline"
    assert entry_of({**entry.body(), "cluster": {"name": "x"}}, 4) == "is a ready standby without its cluster"
    assert entry_of({**entry.body(), "at": float("inf")}, 4) == "is not a pool entry"
    assert entry_of({**entry.body(), "at": True}, 4) == "is not a pool entry"


def test_a_membership_opens_an_interval_once_closes_it_and_opens_another_when_the_run_comes_back() -> None:
    m = Member("r1", (), 0.0).joined(10.0, 40.0).joined(12.0, 42.0)
    assert m.intervals == ((10.0, None),) and m.expires_at == 42.0
    m = m.left(20.0)
    assert m.intervals == ((10.0, 20.0),) and m.left(25.0) == m
    m = m.joined(30.0, 60.0)
    assert m.intervals == ((10.0, 20.0), (30.0, None))
    assert m.spans() == [(10.0, 20.0), (30.0, 60.0)]
    assert member_of(m.body(), "r1") == m
    assert member_of(m.body(), "r2") == "is another run's membership"
    assert member_of({**m.body(), "intervals": [[5.0, 1.0]]}, "r1") == "has an interval that is not one"
    assert member_of({**m.body(), "intervals": "x"}, "r1") == "is not a membership"


def test_a_standby_s_seconds_are_split_between_the_runs_it_covered_then() -> None:
    a = Member("a", ((0.0, 100.0),), 100.0)
    b = Member("b", ((50.0, None),), 200.0)
    # 0..50 a alone, 50..100 both, 100..150 b alone.
    assert share_s("a", [a, b], 0.0, 150.0) == pytest.approx(50 + 25)
    assert share_s("b", [a, b], 0.0, 150.0) == pytest.approx(25 + 50)
    # The shares add up to the standby's seconds while anyone waited on it.
    assert share_s("a", [a, b], 0.0, 150.0) + share_s("b", [a, b], 0.0, 150.0) == pytest.approx(150.0)
    assert share_s("c", [a, b], 0.0, 150.0) == 0.0
    # Only the window asked about counts.
    assert share_s("a", [a, b], 60.0, 80.0) == pytest.approx(10.0)


def test_a_run_that_stopped_renewing_counts_until_its_membership_expires() -> None:
    a = Member("a", ((0.0, None),), 30.0)  # gone silent: counted to 30
    b = Member("b", ((0.0, None),), 1000.0)
    assert share_s("b", [a, b], 0.0, 100.0) == pytest.approx(15 + 70)
    assert others_waiting("b", [a, b], 40.0) is False
    assert others_waiting("b", [a, b], 20.0) is True
    assert others_waiting("a", [a, b.left(50.0)], 60.0) is False


def test_the_pool_key_is_the_control_key_s_and_the_pool_s() -> None:
    key = b"k" * 32
    assert pool_key(key, "team") == pool_key(key, "team")
    assert pool_key(key, "team") != pool_key(key, "other")
    assert pool_key(key, "team") != pool_key(b"j" * 32, "team")
