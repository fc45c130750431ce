"""``action=watch run_id=X``: a run's live progress line and its start-up, fault, failure,
decision and node lines, from any terminal, as the foreground run prints them, until the run ends;
then its result and the exit status the foreground run would have had. Ctrl-C leaves the
watch, never the run.

It follows the journal as it grows (whole lines only: a line still being written waits
for the next read) and reads the live step from the run's control channel, as
``action=status`` does; it writes nothing anywhere.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any, TextIO

from orchestrator.commands.status import UNVERIFIED, live_progress, render, resume_line, summarize
from orchestrator.control.progress import ProgressLine, journal_note
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_USER_ERROR, error
from orchestrator.runstate import rundir
from orchestrator.runstate.events import Event
from orchestrator.runstate.journal import read_typed, typed_lines
from orchestrator.runstate.result import read_result
from orchestrator.runstate.runfiles import read_span
from orchestrator.runstate.state import RunView, apply

POLL_S = 1.0
CHUNK = 1 << 20  # bytes read at most per poll: a long journal is caught up over a few
MAX_LINE = 1 << 20  # a "line" longer than this is no journal line of ours


class JournalTail:
    """The events appended to a journal since the last read: whole lines only. DamagedFile
    when the journal is no regular file (runfiles.read_span)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0
        self._partial = b""

    def read(self) -> list[Event]:
        try:
            data = read_span(self.path, self.offset, CHUNK)
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self._partial + data
        *whole, self._partial = data.split(b"\n")
        if len(self._partial) > MAX_LINE:
            self._partial = b""  # never ends in a line we would parse; skipped as a torn one
        numbered = []
        for raw in whole:
            self.lines += 1
            numbered.append((self.lines, raw + b"\n"))
        return list(typed_lines(self.path, numbered))


def event_line(ev: Event, config: Mapping[str, Any] | None = None) -> str | None:
    """The note the foreground run printed for a journaled event: a fault injected (a
    drill's too), a failure, a decision, a node lost or replaced, ... (start-up phases
    have ProgressLine's). ``config``: the journal's copy of the run's."""
    return journal_note(ev, config or {})


class CtrlC:
    """Ctrl-C, remembered: Python raises KeyboardInterrupt wherever the main thread is, and
    one raised inside a callback whose errors it ignores (an import lock's, a finalizer's)
    is lost there, the watch going on as if no key was pressed. The handler also records
    the press, and the loop leaves at its next look (``check``). A second press while the
    watch says goodbye is ignored; the command line (``leave_quietly``) ignores any later
    one until the process ends."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.SIG_DFL)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.pressed:
            return
        self.pressed = True
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.pressed:
            raise KeyboardInterrupt


@dataclass(frozen=True)
class Look:
    """One look at a run that may be under way: its result.json once it ended; whether no
    controller holds it (``controller_gone``), and of a run with no result then, whether its
    supervisor is resuming it (``restarting``) or nothing will (``died``)."""

    result: dict[str, Any] | None
    controller_gone: bool = False
    restarting: bool = False

    @property
    def died(self) -> bool:
        return self.result is None and self.controller_gone and not self.restarting


def look(run_dir: str) -> Look:
    """How the run stands, from its result.json and its controller's and supervisor's
    locks: what the watch and the Python API (``orchestrator.api``) follow a run by."""
    result = read_result(run_dir)
    gone = rundir.controller_alive(run_dir) is False
    if result is None and gone:
        # The controller may have written its result just before it let go of the lock.
        result = read_result(run_dir)
        if result is None and rundir.controller_alive(run_dir, rundir.SUPERVISOR_LOCK):
            return Look(None, gone, restarting=True)
    return Look(result, gone)


def main(home: str, run_id: str, out: TextIO | None = None, poll_s: float = POLL_S) -> int:
    with CtrlC() as ctrl_c:
        return _follow(home, run_id, ctrl_c, out, poll_s)


def leave_quietly(code: int) -> int:
    """``code``, with SIGINT ignored from here to the process's end once the watch left on
    Ctrl-C: a SIGINT met while the interpreter shuts down (its default handler back) would
    end it by the signal, exit -2 rather than the 130 it chose. For the command line only."""
    if code == EXIT_INTERRUPTED:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


def _follow(home: str, run_id: str, ctrl_c: CtrlC, out: TextIO | None, poll_s: float) -> int:
    stream = out or sys.stderr
    run_dir = rundir.run_path(home, run_id)
    journal = rundir.journal_path(run_dir)
    if not os.path.lexists(journal):
        return error(f"run_id: no run named {run_id!r} under {home}")
    # What the watch reads of the run's folder, read once before a line of the run is
    # shown: a damaged or planted file is refused (DamagedFile) as action=status refuses it.
    for _ in read_typed(journal):
        pass
    read_result(run_dir)
    rundir.controller_alive(run_dir)
    rundir.controller_alive(run_dir, rundir.SUPERVISOR_LOCK)
    tail = JournalTail(journal)
    view = RunView()
    progress = ProgressLine(stream)
    restarting = False
    try:
        while True:
            ctrl_c.check()
            for ev in tail.read():
                view = apply(view, ev)
                progress.event(ev)
                line = event_line(ev, view.config)
                if line:
                    progress.note(line)
            now = look(run_dir)
            result = now.result
            restarting = restarting and now.controller_gone
            if now.restarting:
                if not restarting:
                    progress.note("the controller died; its supervisor resumes it")
                restarting = True
            elif now.died:
                progress.close()
                return error(f"run {run_id}: its controller died; continue it with: {resume_line(home, run_id)}")
            if result is not None:
                # The last progress the run reported, also when it ended before the watch showed any.
                prog = live_progress(run_dir, view)
                if prog and UNVERIFIED not in prog and view.current_region and view.current_generation:
                    progress.update(view.current_region, view.current_generation, prog)
                progress.close()
                return _ended(home, run_id, result)
            prog = live_progress(run_dir, view)
            if prog and UNVERIFIED not in prog and view.current_region and view.current_generation:
                progress.update(view.current_region, view.current_generation, prog)
            time.sleep(poll_s)
    except KeyboardInterrupt:
        progress.close()
        print(f"watch: left run {run_id}; it goes on (action=watch run_id={run_id} to come back)", file=stream)
        return EXIT_INTERRUPTED


def _ended(home: str, run_id: str, result: dict[str, Any]) -> int:
    from orchestrator.commands.run import verdict

    code, line = verdict(home, run_id, result)
    first = line if code == EXIT_USER_ERROR else None
    if first:  # as the foreground run: a bug in the user's code is said first
        print(first, file=sys.stderr, flush=True)
    summary = summarize(rundir.run_path(home, run_id))
    print(render(run_id, summary) if summary else result)
    print(f"result: {rundir.result_path(rundir.run_path(home, run_id))}")
    if line and not first:
        print(line, file=sys.stderr)
    return code
