"""The one retry, backoff and deadline helper (recovery/retry.py), driven without waiting."""

from __future__ import annotations

import pytest

from recovery.retry import Backoff, Deadline, retrying

pytestmark = pytest.mark.unit


def test_backoff_doubles_from_its_first_delay_up_to_its_cap() -> None:
    b = Backoff(0.2, max_s=1.0)
    assert [b.delay(n) for n in range(1, 6)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    assert Backoff(1.0, factor=3).delay(3) == 9.0


class Flaky:
    def __init__(self, errors: list[Exception]) -> None:
        self.errors, self.calls = list(errors), 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def test_retryable_errors_are_retried_with_backoff_then_the_result_comes_back() -> None:
    slept: list[float] = []
    seen: list[tuple[int, str, float]] = []
    call = Flaky([TimeoutError("a"), TimeoutError("b")])
    out = retrying(
        call,
        attempts=3,
        backoff=Backoff(1.0),
        retryable=lambda e: isinstance(e, TimeoutError),
        on_retry=lambda n, e, d: seen.append((n, str(e), d)),
        sleep=slept.append,
    )
    assert out == "done" and call.calls == 3
    assert seen == [(1, "a", 1.0), (2, "b", 2.0)] and slept == [1.0, 2.0]


def test_the_last_error_and_errors_that_are_not_retryable_propagate_unchanged() -> None:
    slept: list[float] = []
    call = Flaky([TimeoutError("1"), TimeoutError("2"), TimeoutError("3")])
    with pytest.raises(TimeoutError, match="3"):
        retrying(call, attempts=3, backoff=Backoff(0.5), retryable=lambda e: True, sleep=slept.append)
    assert call.calls == 3 and slept == [0.5, 1.0]

    call = Flaky([ValueError("bad config")])
    with pytest.raises(ValueError, match="bad config"):
        retrying(call, attempts=5, backoff=Backoff(0.5), retryable=lambda e: isinstance(e, TimeoutError))
    assert call.calls == 1
    with pytest.raises(ValueError, match="attempts"):
        retrying(call, attempts=0, backoff=Backoff(0.5), retryable=lambda e: True)


def test_a_deadline_counts_down_on_its_clock() -> None:
    now = [100.0]
    d = Deadline(5.0, clock=lambda: now[0])
    assert d.remaining() == 5.0 and not d.expired
    now[0] = 104.0
    assert d.remaining() == 1.0 and not d.expired
    now[0] = 106.0
    assert d.remaining() == 0.0 and d.expired
