"""``Run``: a handle on one run under a home, and ``attach`` and ``runs`` to find them.

Everything here reads the run's folder as ``action=status``, ``action=watch`` and
``action=list`` read it, and asks its controller through the request file ``action=stop``
writes: a handle holds nothing but the run's id and home, so any number of them, in any
process, see the same run. A damaged or planted file in the run's folder is a RunError
naming it, as the command line's one line would.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.api.result import Result
from orchestrator.commands.runs_list import RunRow
from orchestrator.errors import RunError, RunTimeout
from orchestrator.runstate import rundir
from orchestrator.runstate.events import Event

if TYPE_CHECKING:
    from orchestrator.commands.watch import JournalTail

POLL_S = 0.5
STOP_WAIT_S = 120.0  # for the controller to tear its clusters down (action=stop's wait)
START_WAIT_S = 60.0  # for a background controller's first attempt to start (detach=true's)


def default_home(home: str | os.PathLike[str] | None = None) -> str:
    """``home`` as an absolute path; None: the config's default (``ORCHESTRATOR_HOME``,
    else ``~/.orchestrator``, as conf/config.yaml says)."""
    if home is None:
        home = os.environ.get("ORCHESTRATOR_HOME") or "~/.orchestrator"
    return os.path.abspath(os.path.expanduser(os.fspath(home)))


@contextmanager
def one_line(run_id: str | None) -> Iterator[None]:
    """A damaged run file as the RunError that names it and the fix, not a traceback."""
    from orchestrator.runstate.runfiles import DamagedFile

    try:
        yield
    except DamagedFile as exc:
        raise RunError(run_id, f"{exc}; {exc.fix}") from None


@dataclass(frozen=True)
class Progress:
    """The live progress the run's newest attempt reports on its control channel."""

    step: int
    total: int | None
    attempt: int  # the attempt's generation: 1, then one more for each restart or failover
    time: float  # when it was reported, seconds since the epoch
    loss: float | None = None
    last_checkpoint: str | None = None
    # Everything reported: steps/s, telemetry, a search's trials...
    fields: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Progress:
        total, loss, ckpt = obj.get("total"), obj.get("loss"), obj.get("last_checkpoint")
        return cls(
            step=int(obj.get("step") or 0),
            total=total if isinstance(total, int) and not isinstance(total, bool) else None,
            attempt=int(obj.get("generation") or 0),
            time=float(obj.get("time") or 0.0),
            loss=float(loss) if isinstance(loss, int | float) and not isinstance(loss, bool) else None,
            last_checkpoint=ckpt if isinstance(ckpt, str) else None,
            fields=dict(obj),
        )


@dataclass(frozen=True)
class Status:
    """A run as ``action=status`` shows it; ``str()`` of it is that table."""

    run_id: str
    # RUNNING and the other run states, then the ended ones (SUCCEEDED, FAILED, CANCELLED,
    # INTERRUPTED), or CONTROLLER_DIED (no result, no controller: Run.resume goes on).
    state: str
    region: str | None
    attempt: int | None
    step: int | None
    total: int | None
    last_checkpoint: str | None
    incidents: list[dict[str, Any]]
    # What to do about the state, where there is something to do (one line).
    note: str | None = None
    goodput: dict[str, Any] | None = None
    result: Result | None = None
    # Everything action=status reads (its attempts, replicas, world, controller...).
    summary: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ended(self) -> bool:
        """It has a result: ended, or stopped to be resumed."""
        return self.result is not None

    def __str__(self) -> str:
        from orchestrator.commands.status import render

        return render(self.run_id, self.summary)

    @classmethod
    def from_summary(cls, run_id: str, s: dict[str, Any]) -> Status:
        result = s.get("result")
        return cls(
            run_id=run_id,
            state=str(s["state"]),
            region=s.get("region"),
            attempt=s.get("generation"),
            step=s.get("step"),
            total=s.get("total"),
            last_checkpoint=s.get("last_checkpoint"),
            incidents=list(s.get("incidents") or []),
            note=s.get("note"),
            goodput=s.get("goodput"),
            result=None if result is None else Result.from_json(result, run_id),
            summary=s,
        )


@dataclass(frozen=True)
class Run:
    """One run under ``home``, by its id: ``launch`` and ``attach`` give one."""

    run_id: str
    home: str

    @property
    def run_dir(self) -> str:
        """Its folder: the journal, config, result.json, controller.log, the ranks' logs."""
        return rundir.run_path(self.home, self.run_id)

    def status(self) -> Status:
        """Where it stands now: its state, region, attempt, step, checkpoint and incidents."""
        from orchestrator.commands.status import describe

        with one_line(self.run_id):
            s = describe(self.home, self.run_id)
        if s is None:
            raise self._missing()
        return Status.from_summary(self.run_id, s)

    def result(self) -> Result | None:
        """Its result.json; None while it runs (or its controller died: see ``status``)."""
        from orchestrator.runstate.result import read_result

        with one_line(self.run_id):
            found = read_result(self.run_dir)
        return None if found is None else Result.from_json(found, self.run_id)

    def progress(self) -> Progress | None:
        """The newest attempt's live progress; None before it reports any, or where what
        is there does not verify under the run's keys (anyone who can write the control
        store could have written it)."""
        from orchestrator.commands.status import UNVERIFIED, live_progress
        from orchestrator.runstate.journal import read_typed
        from orchestrator.runstate.state import fold

        with one_line(self.run_id):
            view = fold(list(read_typed(rundir.journal_path(self._checked()))))
        found = live_progress(self.run_dir, view)
        return None if found is None or UNVERIFIED in found else Progress.from_json(found)

    def events(self, follow: bool = False, poll_s: float = POLL_S) -> Iterator[Event]:
        """The journal's events (typed records of ``orchestrator.runstate.events``; the
        journal events page lists them), oldest first: those written so far, or with
        ``follow`` every one until the run ends (or its controller dies with no supervisor
        to resume it). Breaking out of the loop leaves the run as it is."""
        from orchestrator.commands.watch import JournalTail, look

        tail = JournalTail(rundir.journal_path(self._checked()))
        while True:
            with one_line(self.run_id):
                yield from _drain(tail)
                if not follow:
                    return
                now = look(self.run_dir)
                if now.result is not None or now.died:
                    # Its last lines, written before its result or its lock went.
                    yield from _drain(tail)
                    return
            time.sleep(poll_s)

    def wait(self, timeout: float | None = None, poll_s: float = POLL_S) -> Result:
        """Its result once it has one (ended, or stopped: ``resumable``). RunTimeout after
        ``timeout`` seconds, the run going on; RunError when its controller died with
        nothing to resume it (``resume`` goes on from its newest checkpoint)."""
        from orchestrator.commands.watch import look

        run_dir = self._checked()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with one_line(self.run_id):
                now = look(run_dir)
            if now.result is not None:
                return Result.from_json(now.result, self.run_id)
            if now.died:
                raise RunError(self.run_id, f"run {self.run_id}: its controller died; go on with run.resume()")
            if deadline is not None and time.monotonic() >= deadline:
                raise RunTimeout(self.run_id, f"run {self.run_id}: not ended after {timeout:.0f}s; it goes on")
            time.sleep(poll_s)

    def stop(self, wait: bool = True, timeout: float = STOP_WAIT_S) -> Result | None:
        """Stop it as Ctrl-C would: INTERRUPTED, its clusters torn down, its checkpoints
        kept; ``resume`` goes on. With ``wait``, its result once the controller has let it
        go (a run that had already ended: its result as it is); else None at once."""
        return self._ask("stop", wait, timeout)

    def cancel(self, wait: bool = True, timeout: float = STOP_WAIT_S) -> Result | None:
        """End it for good: CANCELLED, its clusters torn down, its checkpoints kept, never
        resumed. As ``stop`` otherwise."""
        return self._ask("cancel", wait, timeout)

    def resume(self, *overrides: str, wait_s: float = START_WAIT_S) -> Run:
        """Go on with a stopped run (or one whose controller died) from its newest
        verified checkpoint, its controller in the background as ``launch``'s; this handle,
        once the resumed run's first attempt has started or ``wait_s`` has passed.
        ``overrides``: what ``action=resume`` takes besides (``cloud.control_store=URL``
        for a takeover, ``progress=false``)."""
        from orchestrator.api.background import start
        from orchestrator.api.config import compose_words, quote

        words = ["action=resume", f"run_id={self.run_id}", f"home={quote(self.home)}", *overrides]
        cfg = compose_words(words)
        with one_line(self.run_id):
            rundir.check_run_folder(self.run_dir)
        start(cfg, words, self.run_id, wait_s)
        return self

    def _ask(self, action: str, wait: bool, timeout: float) -> Result | None:
        from orchestrator.commands import stop

        with one_line(self.run_id):
            asked = stop.ask(self.home, self.run_id, action, source="python")
            if asked.request is None and asked.code == 0:
                return self.result()  # it had ended already
            if asked.request is None:
                raise RunError(self.run_id, asked.said)
            if not wait:
                return None
            ended = stop.await_end(self.home, self.run_id, timeout, action)
        if ended.result is None:
            raise RunError(self.run_id, ended.said)
        return Result.from_json(ended.result, self.run_id)

    def _checked(self) -> str:
        """Its folder, once it is one a run's files can be read from."""
        if not os.path.lexists(rundir.journal_path(self.run_dir)):
            raise self._missing()
        with one_line(self.run_id):
            rundir.check_run_folder(self.run_dir)
        return self.run_dir

    def _missing(self) -> RunError:
        return RunError(self.run_id, f"run_id: no run named {self.run_id!r} under {self.home}")


def _drain(tail: JournalTail) -> Iterator[Event]:
    """What the journal holds past ``tail``'s offset, read to its end."""
    while True:
        before = tail.offset
        yield from tail.read()
        if tail.offset == before:
            return


def attach(run_id: str, home: str | os.PathLike[str] | None = None) -> Run:
    """A handle on the run ``run_id`` under ``home`` (default: the config's); RunError when
    there is none, or its folder cannot be read."""
    found = Run(str(run_id), default_home(home))
    found._checked()
    return found


def runs(home: str | os.PathLike[str] | None = None) -> list[RunRow]:
    """Every run under ``home``, newest first, as ``action=list`` shows them (a folder that
    cannot be read is a row saying why, never an error)."""
    from orchestrator.commands.runs_list import list_runs

    with one_line(None):
        return list_runs(default_home(home))
