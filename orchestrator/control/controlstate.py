"""A controller's hold on its run in the control store: the lease (lease.py) that keeps
every other controller, on any machine, from driving the run, and the mirror (mirror.py)
of the run's state that lets one take over when this one's machine is lost.

Every act of the controller passes ``guard()`` first: a journal line (``Controller.emit``),
a cluster launched, a runtime started, a node replaced or dropped, a cluster torn down
(``GuardedProvider``), a word on the control channel (``ControlChannel.before_write``), a
mirror written. A controller whose lease was taken (it was
frozen, or cut off, while another took the run over) stands down there: one journal line
on its own machine, one line on stderr, and it exits at once, with no teardown, no
cleanup and no result (exit EXIT_STOOD_DOWN, which its supervisor does not restart).
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from orchestrator.control.lease import ControllerLease, LeaseHeld, LeaseRecord
from orchestrator.control.mirror import SYNC_EVENTS, StateMirror
from orchestrator.runstate import rundir
from orchestrator.runstate.events import ClaimIgnored, ControllerStoodDown, Event, LeaseIgnored, LeaseTaken
from orchestrator.runstate.journal import Journal

# A controller that found its lease taken by another: not a death, never restarted.
EXIT_STOOD_DOWN = 5
# One that could not reach its control store for a whole lease: its supervisor restarts it.
EXIT_UNCONFIRMED = 1


class ControlStoreError(RuntimeError):
    """The control store cannot be reached for the run's lease; one line naming the key."""


def run_root(control_store: str, run_id: str) -> str:
    """The run's folder in the control store (its control channel is ``control/`` below it)."""
    return f"{control_store.rstrip('/')}/{run_id}"


class ControlState:
    def __init__(self, cfg: Any, run_id: str, run_dir: str, state_key: bytes, out: Any = None) -> None:
        from recovery.storage import open_fs

        self.run_id, self.run_dir = run_id, run_dir
        self.out = out or sys.stderr
        self.fs, root = open_fs(run_root(cfg.cloud.control_store, run_id), dict(cfg.cloud.control_options or {}))
        self.root = root
        self.key = state_key
        self.interval_s = max(0.2, float(cfg.recovery.heartbeat_interval_s))
        self.lease = ControllerLease(self.fs, root, state_key, run_id, float(cfg.recovery.controller_lease_s))
        self.mirror: StateMirror | None = None
        self._down = threading.Lock()
        # The controller's emit, once it has one: what the lease found in its place is
        # journaled at the next act (never from inside the lease's own read).
        self.emit: Callable[[Event], Any] | None = None
        self._ignored: deque[str] = deque()
        self._ignored_said: set[str] = set()
        self._ignored_lock = threading.Lock()
        self.lease.on_ignored = self._lease_ignored

    @property
    def controller(self) -> int:
        rec = self.lease.record
        return 0 if rec is None else rec.controller

    def take(self) -> LeaseTaken:
        """The lease (LeaseHeld when another controller's holds; ControlStoreError when the
        store cannot be reached), and the mirror under its generation."""
        try:
            # Every generation is claimed before its mirror is written: the claims are the floor.
            rec = self.lease.take()
        except LeaseHeld:
            raise
        except Exception as exc:
            raise ControlStoreError(
                f"cloud.control_store: cannot take the run's lease there ({type(exc).__name__}: {str(exc)[:200]}); "
                "check that this machine reaches it (cloud.control_options)"
            ) from None
        self.mirror = StateMirror(self.fs, self.root, self.key, self.run_id, rec.controller, self.run_dir, self.guard)
        prev = self.lease.previous
        return LeaseTaken(
            controller=rec.controller,
            holder=rec.holder,
            expires_in_s=round(rec.expires_at - rec.renewed_at, 3),
            previous=None if prev is None else prev.holder if isinstance(prev, LeaseRecord) else f"lease.json {prev}",
            previous_controller=prev.controller if isinstance(prev, LeaseRecord) else None,
        )

    def start(self) -> None:
        assert self.mirror is not None, "start() before take()"
        self.lease.start(self.interval_s, self.stand_down)
        self.mirror.start(self.interval_s)

    def guard(self) -> None:
        """Before an act: returns while the lease is this controller's, else never."""
        if self.lease.record is None:
            return  # not taken yet: the controller is still being built, it acts on nothing
        lost = self.lease.check()
        if lost is not None:
            self.stand_down(*lost)
        self._say_ignored()

    def claim_notes(self) -> list[ClaimIgnored]:
        """The claims passed over while taking the lease, once each, for the journal."""
        seen: dict[str, str] = {}
        for name, why in self.lease.ignored_claims:
            seen.setdefault(name, why)
        return [ClaimIgnored(name=name, reason=why[:300]) for name, why in seen.items()]

    def _lease_ignored(self, reason: str) -> None:
        with self._ignored_lock:
            if reason not in self._ignored_said and len(self._ignored_said) < 100:
                self._ignored_said.add(reason)
                self._ignored.append(reason)

    def _say_ignored(self) -> None:
        while self.emit is not None:
            with self._ignored_lock:
                if not self._ignored:
                    return
                reason = self._ignored.popleft()
            self.emit(LeaseIgnored(controller=self.controller, reason=reason[:300]))

    def written(self, event: Event) -> None:
        """After a journal line: the mirror at once when a restore or a takeover depends on it."""
        if self.mirror is not None and event.TYPE in SYNC_EVENTS:
            self.mirror.try_flush()

    def close(self) -> None:
        """The controller ends here (the run's end, a stop, a refusal): last mirror, lease freed."""
        if self.mirror is not None:
            self.mirror.stop()
        self.lease.release()

    def stand_down(self, reason: str, unreachable: bool) -> None:
        with self._down:
            try:
                Journal(rundir.journal_path(self.run_dir)).emit(
                    ControllerStoodDown(controller=self.controller, reason=reason[:300])
                )
                print(
                    f"run {self.run_id}: controller {self.controller} stands down: its lease is {reason}; "
                    "it leaves the run to the controller that holds it",
                    file=self.out,
                    flush=True,
                )
            finally:
                os._exit(EXIT_UNCONFIRMED if unreachable else EXIT_STOOD_DOWN)


# Provider calls that change a cluster: each passes the lease's guard first.
_ACTS = frozenset(
    {"launch", "start_runtime", "drop_node", "replace_node", "teardown", "cut_connection", "sweep_runtime"}
)


class GuardedProvider:
    """The run's provider, each act of it behind the controller's lease."""

    def __init__(self, provider: Any, guard: Any) -> None:
        self._provider = provider
        self._guard = guard

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._provider, name)
        if name not in _ACTS or not callable(attr):
            return attr
        guard = self._guard

        def act(*args: Any, **kwargs: Any) -> Any:
            guard()
            return attr(*args, **kwargs)

        return act
