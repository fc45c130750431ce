"""How an event reaches the journal, the run's state and every listener of the run.

Whatever the controller, an attempt, the watch or the standby did is said through one
call, ``RunEvents.emit``: the event is journaled, applied to the run's folded state
(``orchestrator.runstate.state.apply``, the fold ``action=resume`` replays the journal
with), then handed to each listener the run was wired with (``wiring``): the notifier, the
TensorBoard writer, the progress line, the fault injector's failover point, and those
``metrics.listeners`` names. A new consumer of the run's events is one more listener
there; nothing else in the control loop changes.

A listener is told in the journal's order, with the event as written and the run's state
just after it, on the thread that emitted it and under the run's lock: it must not block
(the notifier and the TensorBoard writer hand their work to threads of their own). One
that raises costs itself that event: its first failure is journaled (``listener_failed``),
and the run goes on, as does the listener with the events after it. An event a listener
emits while it is told of another is journaled at once, and told after that one.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from orchestrator.config.schema import Config
from orchestrator.config.usercode import listener_factory
from orchestrator.control.cleanup import run_all
from orchestrator.runstate.events import Event, ListenerFailed, Transition, type_of
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.lifecycle import RunState, check_transition
from orchestrator.runstate.state import RunView, apply


@runtime_checkable
class Listener(Protocol):
    """Told of every event the run journals. A ``close()`` of its own, if it has one, is
    called once at the run's end, after the last event (``run_finished``)."""

    def on_event(self, event: Event, view: RunView) -> None: ...


@dataclass(frozen=True)
class ListenerRun:
    """What a listener ``metrics.listeners`` names is made with (its one argument)."""

    run_id: str
    run_dir: str  # the run's folder on the controller's machine (its journal, its result)
    cfg: Config


@dataclass(frozen=True)
class Registered:
    name: str
    on_event: Callable[[Event, RunView], object]
    close: Callable[[], object] | None = None


class Named:
    """A listener ``metrics.listeners`` names, made with the run (``ListenerRun``) when it is
    told its first event, so that what goes wrong making it (its module gone since the run
    began, a constructor that raises, no ``on_event``) is journaled as its failure, once,
    after the run's start, and never keeps a run from going on or from being resumed."""

    def __init__(self, spec: str, run: ListenerRun, key: str) -> None:
        self.name = spec
        self.run, self.key = run, key
        self.inner: Listener | None = None
        self.broken = False

    def on_event(self, event: Event, view: RunView) -> None:
        if self.broken:
            return
        if self.inner is None:
            try:
                self.inner = self._make()
            except Exception:
                self.broken = True
                raise
        self.inner.on_event(event, view)

    def _make(self) -> Listener:
        made = listener_factory(self.name, self.key)(self.run)
        if not callable(getattr(made, "on_event", None)):
            raise TypeError(f"{self.name} made a {type(made).__name__}, which has no on_event(event, view)")
        return made  # type: ignore[no-any-return]

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()


def listener_name(listener: object) -> str:
    """A listener's name in the journal: its own ``name``, else its class's ``module:Name``."""
    name = getattr(listener, "name", None)
    if isinstance(name, str) and name:
        return name
    cls = type(listener)
    return f"{cls.__module__}:{cls.__qualname__}"


def error_line(exc: BaseException) -> str:
    """The exception's type and its message's first line, bounded."""
    text = str(exc).strip().splitlines()
    return (f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__)[:300]


class RunEvents:
    """The run's journal, its folded state (``view``: the one place the run's state is
    kept) and its listeners. ``guard``: called before each line is written (the control
    store's lease); ``written``: after it, outside the run's lock unless a listener emitted
    the event (the control store's mirror). Both are part of making the journal durable,
    not listeners: no listener's failure can skip them."""

    def __init__(
        self,
        journal: Journal,
        *,
        guard: Callable[[], object] | None = None,
        written: Callable[[Event], object] | None = None,
    ) -> None:
        self.journal = journal
        self.guard = guard
        self.written = written
        self._view = RunView()
        # Re-entrant: a listener, or a guard saying what it found, may emit.
        self._lock = threading.RLock()
        self._listeners: list[Registered] = []
        self._failed: set[str] = set()
        self._untold: deque[tuple[Event, RunView]] = deque()
        self._telling = False
        # The highest generation handed out: a standby's launch takes its number before
        # any event names it, and must never share it with an attempt.
        self._allocated = 0

    @property
    def view(self) -> RunView:
        return self._view

    @property
    def generation(self) -> int:
        """The highest generation the run has named or handed out."""
        with self._lock:
            return max(self._allocated, self._view.generation)

    def listen(
        self, name: str, on_event: Callable[[Event, RunView], object], close: Callable[[], object] | None = None
    ) -> None:
        with self._lock:
            self._listeners.append(Registered(name, on_event, close))

    def add(self, listener: Listener, name: str | None = None) -> None:
        close = getattr(listener, "close", None)
        self.listen(name or listener_name(listener), listener.on_event, close if callable(close) else None)

    @property
    def listeners(self) -> tuple[str, ...]:
        return tuple(r.name for r in self._listeners)

    def emit(self, event: Event) -> Event:
        """Journal ``event``, apply it to the run's state, tell every listener: the event as written."""
        if self.guard is not None:
            self.guard()
        with self._lock:
            written = self.journal.emit(event)
            self._view = apply(self._view, written)
            self._untold.append((written, self._view))
            if not self._telling:
                self._tell_all()
        if self.written is not None:
            self.written(written)
        return written

    def _tell_all(self) -> None:
        self._telling = True
        try:
            while self._untold:
                event, view = self._untold.popleft()
                for listener in list(self._listeners):
                    self._tell(listener, event, view)
        finally:
            self._telling = False

    def _tell(self, listener: Registered, event: Event, view: RunView) -> None:
        try:
            listener.on_event(event, view)
        except Exception as exc:  # a listener's bug costs it the event, never the run
            if listener.name not in self._failed:
                self._failed.add(listener.name)
                self.emit(ListenerFailed(listener=listener.name, error=error_line(exc), event=type_of(event)))

    def to(self, new: RunState, **info: Any) -> Event:
        """Move the run's lifecycle to ``new``: checked against the state the journal
        folds to (IllegalTransition), journaled as the transition."""
        with self._lock:
            prev = self._view.state
            check_transition(prev, new)
            return self.emit(Transition(to=new, from_=prev, **info))

    def restore(self, view: RunView) -> None:
        """The state a resumed controller takes on: its journal, folded."""
        with self._lock:
            self._view = view

    def next_generation(self) -> int:
        """A new attempt's (or standby's) generation, above every one named or handed out."""
        with self._lock:
            self._allocated = max(self._allocated, self._view.generation) + 1
            return self._allocated

    def close(self) -> None:
        """The run's end: each listener's ``close``, in the order they were added (every
        one, even after one raised)."""
        run_all([r.close for r in self._listeners if r.close is not None])
