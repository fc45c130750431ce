"""A listener's bounded queue and its thread (orchestrator/metrics/drain.py): batches to the
owner's work, a full queue dropping, a failing work stopping, a close bounded in time,
and each failure said once, in one line."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from orchestrator.metrics import drain
from orchestrator.metrics.drain import Drain

pytestmark = pytest.mark.unit


def _drain(
    work: Callable[[list[int], bool], object],
    failures: list[str],
    *,
    size: int = 100,
    gather_s: float = 0.0,
    close_s: float = 5.0,
    most: int | None = None,
    after_failure: Callable[[], object] | None = None,
) -> Drain[int]:
    return Drain(
        "test-drain",
        work,
        failures.append,
        size=size,
        gather_s=gather_s,
        close_s=close_s,
        most=most,
        stopped="stopped: ",
        dropped=lambda n: f"{n} dropped",
        late=lambda s: f"not done within {s:g} s",
        after_failure=after_failure,
    )


def test_what_is_offered_reaches_the_work_in_order_and_close_marks_the_last_batch() -> None:
    batches: list[tuple[list[int], bool]] = []
    failures: list[str] = []
    d = _drain(lambda items, last: batches.append((items, last)), failures)
    for i in range(10):
        d.offer(i)
    d.close()
    assert [i for items, _ in batches for i in items] == list(range(10))
    assert batches[-1][1] and not any(last for _, last in batches[:-1])
    assert failures == [] and d.off
    d.offer(99)  # after close: taken by no one, and no error
    d.close()  # once
    assert failures == []


def test_offers_within_the_gathering_are_one_batch_and_close_cuts_the_wait_short() -> None:
    batches: list[list[int]] = []
    failures: list[str] = []
    d = _drain(lambda items, last: batches.append(items), failures, gather_s=3600.0)
    for i in range(5):
        d.offer(i)
    started = time.monotonic()
    d.close()
    assert time.monotonic() - started < 5
    assert [i for b in batches for i in b] == list(range(5)) and len(batches) <= 2
    assert failures == []


def test_a_batch_takes_at_most_most_items() -> None:
    sizes: list[int] = []
    failures: list[str] = []
    hold = threading.Event()

    def work(items: list[int], last: bool) -> None:
        hold.wait(5)
        sizes.append(len(items))

    d = _drain(work, failures, most=3)
    for i in range(10):
        d.offer(i)
    hold.set()
    d.close()
    assert sum(sizes) == 10 and max(sizes) <= 3 and failures == []


def test_work_that_raises_stops_the_drain_and_is_said_once_in_one_line() -> None:
    failures: list[str] = []
    cleaned = threading.Event()

    def work(items: list[int], last: bool) -> None:
        raise OSError("no space\nleft on device")

    d = _drain(work, failures, after_failure=cleaned.set)
    d.offer(1)
    assert cleaned.wait(5)
    assert d.off
    d.offer(2)  # dropped quietly: the drain stopped
    d.close()
    assert failures == ["stopped: OSError: no space left on device"]


def test_a_full_queue_drops_and_says_how_many_once() -> None:
    failures: list[str] = []
    release = threading.Event()
    d = _drain(lambda items, last: release.wait(5), failures, size=2)
    for i in range(50):
        d.offer(i)
    release.set()
    d.close()
    assert len(failures) == 1 and failures[0].endswith(" dropped")
    assert 0 < int(failures[0].split()[0]) <= 50


def test_a_close_that_waits_in_vain_returns_after_close_s_and_says_so() -> None:
    failures: list[str] = []
    release = threading.Event()
    d = _drain(lambda items, last: release.wait(10), failures, size=1, close_s=0.3)
    d.offer(1)
    d.offer(2)
    started = time.monotonic()
    d.close()
    assert time.monotonic() - started < 5
    release.set()
    assert failures == ["not done within 0.3 s"]


def test_a_long_failure_is_cut_to_error_max() -> None:
    failures: list[str] = []

    def work(items: list[int], last: bool) -> None:
        raise ValueError("x" * 1000)

    d = _drain(work, failures)
    d.offer(1)
    d.close()
    assert len(failures) == 1 and len(failures[0]) == drain.ERROR_MAX and failures[0].endswith("...")
