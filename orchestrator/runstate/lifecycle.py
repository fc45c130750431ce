"""A run's lifecycle as an explicit state machine."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum


class RunState(StrEnum):
    PENDING = "PENDING"
    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    # Stopped by Ctrl-C or SIGTERM: clusters torn down, checkpoints kept; action=resume
    # takes it on from its newest verified checkpoint.
    INTERRUPTED = "INTERRUPTED"
    # Ended by action=cancel: clusters torn down, checkpoints kept, never resumed.
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)

    @property
    def stopped(self) -> bool:
        """No controller carries the run on: it ended, or waits for action=resume."""
        return self.terminal or self is RunState.INTERRUPTED


_STOP = frozenset({RunState.FAILED, RunState.INTERRUPTED, RunState.CANCELLED})
ALLOWED: dict[RunState, frozenset[RunState]] = {
    RunState.PENDING: frozenset({RunState.PROVISIONING}) | _STOP,
    RunState.PROVISIONING: frozenset({RunState.RUNNING, RunState.RECOVERING}) | _STOP,
    RunState.RUNNING: frozenset({RunState.SUCCEEDED, RunState.RECOVERING}) | _STOP,
    RunState.RECOVERING: frozenset({RunState.PROVISIONING}) | _STOP,
    RunState.SUCCEEDED: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.CANCELLED: frozenset(),
    # action=resume: a new attempt, or the verdict a resume can reach before one.
    RunState.INTERRUPTED: frozenset({RunState.PROVISIONING, RunState.FAILED}),
}


class IllegalTransition(RuntimeError):
    pass


def check_transition(prev: RunState, new: RunState) -> None:
    """IllegalTransition unless ``prev -> new`` is an edge of a run's lifecycle."""
    if new not in ALLOWED[prev]:
        raise IllegalTransition(f"{prev} -> {new} is not a transition of a run")


class StateMachine:
    """Holds the state; every transition goes through ``to`` and is reported to a listener."""

    def __init__(
        self,
        listener: Callable[[RunState, RunState, dict[str, object]], None] | None = None,
        state: RunState = RunState.PENDING,
    ) -> None:
        self.state = state
        self._listener = listener

    def to(self, new: RunState, **info: object) -> tuple[RunState, RunState]:
        prev = self.state
        check_transition(prev, new)
        self.state = new
        if self._listener is not None:
            self._listener(prev, new, dict(info))
        return prev, new
