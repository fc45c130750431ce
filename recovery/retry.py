"""Retries, backoff and deadlines: the one place their arithmetic lives.

Who retries what, so that nothing is retried twice over: the attempt retries a
provisioning error the provider calls transient (``orchestrator/control/attempt.py``; a
timeout is not retried: the policy fails over), the SkyPilot provider retries SDK
calls that failed on the way to SkyPilot's API server (``SkyPilotProvider._sdk``),
and the checkpointer retries a failing store with backoff until ``store_outage_s``,
then falls back to the next store. Each passes its own rule of what is retryable.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Exponential delays: ``first_s`` after the first failure, times ``factor`` after
    each further one, never more than ``max_s``."""

    first_s: float
    max_s: float = math.inf
    factor: float = 2.0

    def delay(self, failures: int) -> float:
        """The wait after the ``failures``-th failure in a row (1 for the first)."""
        return min(self.first_s * self.factor ** max(failures - 1, 0), self.max_s)


def retrying(
    call: Callable[[], T],
    *,
    attempts: int,
    backoff: Backoff,
    retryable: Callable[[Exception], bool],
    on_retry: Callable[[int, Exception, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, again after a retryable exception, at most ``attempts`` times in all;
    ``on_retry(failures, exc, delay)`` before each wait. The last exception, or one that is
    not retryable, propagates unchanged."""
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    for failures in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if failures == attempts or not retryable(exc):
                raise
            delay = backoff.delay(failures)
            if on_retry is not None:
                on_retry(failures, exc, delay)
            sleep(delay)
    raise AssertionError("unreachable")


@dataclass
class Deadline:
    """A point in time ``seconds`` from now on ``clock`` (monotonic by default)."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    at: float = field(init=False)

    def __post_init__(self) -> None:
        self.at = self.clock() + self.seconds

    def remaining(self) -> float:
        return max(0.0, self.at - self.clock())

    @property
    def expired(self) -> bool:
        return self.clock() >= self.at
