"""``action=list``: every run under home, one row each, newest first.

A row is one more view of the run's folded journal (``orchestrator.runstate``) and
its result.json, read as ``action=status`` reads them, plus whether a controller
holds the run's lock (``orchestrator.runstate.rundir.controller_alive``), which tells a run
that goes on from one whose controller died. A run folder that cannot be read is a
row of its own (UNREADABLE, and why) and never stops the listing: one run's damaged or
planted file (a journal that is a FIFO, a lock that is a symlink) is that run's row, named
with the fix, while every other run is listed as usual and the list exits 0. A list is a
survey of the home: the one bad folder shows, and the actions on that run (status,
resume, ...) refuse it with exit status 2.

The pure part (``row_from``, ``newest_first``, ``render_table``, ``render_json``)
takes what was read; ``read_row`` and ``list_runs`` do the reading.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from orchestrator.commands.goodput_text import cost_total, dollars, unpriced
from orchestrator.commands.status import CONTROLLER_DIED, UNVERIFIED, FromStore, live_progress, run_goodput
from orchestrator.errors import printable
from orchestrator.runstate import rundir
from orchestrator.runstate.goodput import amount
from orchestrator.runstate.journal import DamagedFile, read_typed
from orchestrator.runstate.result import read_result, shown_total
from orchestrator.runstate.rundir import controller_alive
from orchestrator.runstate.runfiles import REMOVE
from orchestrator.runstate.state import RunView, fold, planned_total
from orchestrator.wire.codec import json_is

# Statuses beyond the run states (orchestrator.runstate.lifecycle.RunState):
UNREADABLE = "UNREADABLE"  # its folder, journal or result.json cannot be read
# CONTROLLER_DIED (orchestrator.commands.status): a journal, no result, no controller holds the lock
EMPTY = "EMPTY"  # a folder without a word of a controller's in it
# A run in the control store whose mirror does not verify under the user's control key
# (orchestrator/commands/remote.py): nothing of it is shown but its id and why.
UNVERIFIED_RUN = "UNVERIFIED"

START_ONE = "python -m orchestrator job=digits"
_NUMBER = (int, float)


@dataclass(frozen=True)
class RunRow:
    """One run as the list shows it; ``as_json`` is the same as flat keys."""

    run_id: str
    status: str
    job: str | None = None
    region: str | None = None
    step: int | None = None
    total: int | None = None
    incidents: int | None = None
    started_at: float | None = None  # seconds since the epoch
    duration_s: float | None = None
    reason: str = ""  # why it failed, is unreadable or has no controller: one line
    goodput: float | None = None  # productive training / wall time (result.json's goodput block)
    cost_usd: float | None = None  # None: unknown (a region without a price, or no nodes yet)
    unpriced: bool = False  # a region it used has no price (cloud.regions.<r>.hourly_cost)
    # When its folder last changed: orders a run that never said when it started.
    seen_at: float = 0.0
    # Where it was read, in a list that takes runs from the control store too ("local" or
    # "store"); None (a list of this home alone): no such key, as before it existed.
    source: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "seen_at" and not (k == "source" and self.source is None)}


# --- rows from what was read (pure) -----------------------------------------------------------


def _section(config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    # The journal's copy of the config is for display: a damaged section shows as unknown.
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def _int_or_none(value: Any) -> int | None:
    return value if json_is(value, (int,)) else None


def _job_name(view: RunView) -> str | None:
    name = _section(view.config, "job").get("name")
    return name if isinstance(name, str) else None


def _started(view: RunView) -> float | None:
    # When the run started; a journal without its run_started, at its first event.
    return view.started_at if view.run_starts else view.first_ts


def row_from(
    run_id: str,
    view: RunView,
    result: Mapping[str, Any] | None,
    progress: Mapping[str, Any] | None,
    alive: bool | None,
    now: float,
    seen_at: float = 0.0,
    goodput: Mapping[str, Any] | None = None,
) -> RunRow:
    """The row of a run whose files were read: its folded journal, result.json (None
    before the run ended), the live progress of its newest attempt, and whether a
    controller holds its lock (None: cannot be told)."""
    started = _started(view)
    if started is None and result is not None and json_is(result.get("started_at"), _NUMBER):
        started = float(result["started_at"])
    live = progress or {}
    # A live progress that does not open under the run's keys is nobody's: the journal's step.
    unverified = live.get(UNVERIFIED)
    step = None if unverified else _int_or_none(live.get("step"))
    total = _int_or_none(live.get("total"))
    base = RunRow(
        run_id=run_id,
        status=view.status,
        job=_job_name(view),
        region=view.current_region,
        # No live step (none yet, or the control store is out of reach): the last the journal named.
        step=step if step is not None else (view.last_step or None),
        # The total the run's progress reports (a search's search steps, not job.steps).
        total=total if total is not None else planned_total(view.config),
        # Recorded incidents, and the one being recovered from.
        incidents=len(view.incidents) + (1 if view.pending is not None else 0),
        started_at=started,
        seen_at=seen_at,
        **_goodput_fields(goodput),
    )
    if result is not None:
        # Ended: result.json is the word on status, step, incidents and duration.
        reason = result.get("reason") if result["status"] == "FAILED" else None
        if result["status"] == "INTERRUPTED":
            reason = f"interrupted; continue it with action=resume run_id={run_id}"
        return replace(
            base,
            status=str(result["status"]),
            step=_int_or_none(result["final_step"]),
            total=shown_total(result, base.total),
            incidents=len(result["incidents"]),
            duration_s=float(result["duration_s"]),
            reason=reason if isinstance(reason, str) else "",
        )
    if view.first_ts is None:
        # No word of a controller's: one starting now, or nothing ran under this name.
        if alive:
            return replace(base, status=str(view.state))
        return replace(base, status=EMPTY, reason="no journal: nothing ran under this name")
    since = None if started is None else max(0.0, (now if alive is not False else view.last_ts) - started)
    if alive is False:
        # No result.json means not finished (whatever the journal's last state), and no
        # lock means no controller: it lasted until its last journaled event.
        return replace(
            base,
            status=CONTROLLER_DIED,
            duration_s=since,
            reason=f"its controller died; continue it with action=resume run_id={run_id}",
        )
    reason = "" if alive else "cannot tell whether its controller runs (controller.lock cannot be opened)"
    if unverified and not reason:
        reason = f"step from the journal: {unverified}"
    return replace(base, duration_s=since, reason=reason)


def _goodput_fields(g: Mapping[str, Any] | None) -> dict[str, Any]:
    if not isinstance(g, Mapping):
        return {}
    return {"goodput": amount(g.get("goodput")), "cost_usd": cost_total(g), "unpriced": bool(unpriced(g))}


def unreadable(run_id: str, reason: str, seen_at: float = 0.0, view: RunView | None = None) -> RunRow:
    """A run whose files cannot be read; what its journal said, when that could be read
    (a damaged result.json), still shows and orders it."""
    if view is None:
        return RunRow(run_id=run_id, status=UNREADABLE, reason=reason, seen_at=seen_at)
    return RunRow(
        run_id=run_id,
        status=UNREADABLE,
        job=_job_name(view),
        region=view.current_region,
        started_at=_started(view),
        reason=reason,
        seen_at=seen_at,
    )


def newest_first(rows: Iterable[RunRow]) -> list[RunRow]:
    """By start time, newest first; a run that never said when it started by when its
    folder last changed; ties by run id, last first."""
    return sorted(rows, key=lambda r: (r.started_at if r.started_at is not None else r.seen_at, r.run_id), reverse=True)


# --- formatting (pure) ------------------------------------------------------------------------

HEADER = ("RUN ID", "JOB", "STATUS", "REGION", "STEP", "INCIDENTS", "STARTED", "DURATION", "GOODPUT", "COST")


def fmt_step(step: int | None, total: int | None) -> str:
    if step is not None and total is None:
        return str(step)  # nothing to count against (a train function that declares no count)
    if step is None and total is None:
        return "-"
    return f"{'-' if step is None else step}/{'?' if total is None else total}"


def fmt_started(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def cells(row: RunRow) -> tuple[str, ...]:
    return tuple(
        printable(c)
        for c in (
            row.run_id,
            row.job or "-",
            row.status,
            row.region or "-",
            fmt_step(row.step, row.total),
            "-" if row.incidents is None else str(row.incidents),
            fmt_started(row.started_at),
            fmt_duration(row.duration_s),
            "-" if row.goodput is None else f"{100 * row.goodput:.0f}%",
            dollars(row.cost_usd) if row.cost_usd is not None else ("?" if row.unpriced else "-"),
        )
    )


def _cut(line: str, width: int | None) -> str:
    if width is None or len(line) <= width:
        return line
    return line[: max(0, width - 1)] + "…"


def columns(table: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells as aligned columns, two spaces apart (a sweep's summary is one too)."""
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table]


# The last column of a list that takes runs from the control store too: where each was read.
SOURCE_HEADER = "FROM"


def render_table(rows: list[RunRow], width: int | None = None) -> str:
    """The rows as aligned columns, then one line per row that has a reason. ``width``
    (a terminal's) cuts those lines to fit; the table itself is never cut. Rows that say
    where they were read get a last column saying so; the columns before it stay as they are."""
    if any(r.source is not None for r in rows):
        table = [(*HEADER, SOURCE_HEADER), *((*cells(r), printable(r.source or "-")) for r in rows)]
    else:
        table = [HEADER, *(cells(r) for r in rows)]
    lines = columns(table)
    notes = [f"{printable(r.run_id)}: {printable(r.reason)}" for r in rows if r.reason]
    if notes:
        lines.append("")
        lines.extend(_cut(n, width) for n in notes)
    return "\n".join(lines)


def render_json(rows: list[RunRow]) -> str:
    return json.dumps([r.as_json() for r in rows], indent=2)


def no_runs(home: str) -> str:
    return f"no runs under {printable(home)}; start one with: {START_ONE} home={printable(home)}"


# --- reading a home ---------------------------------------------------------------------------


def _seen_at(path: str) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def read_row(runs_dir: str, name: str, now: float, where: FromStore | None = None) -> RunRow:
    """The row of ``runs_dir/name``; a folder that cannot be read is an UNREADABLE row.
    ``where``: a run read from the control store, whose controller lives while its lease
    holds (no lock in this folder says so) and goes on by a takeover."""
    run_dir = os.path.join(runs_dir, name)
    seen = _seen_at(run_dir)
    if not os.path.isdir(run_dir):
        what = "a link to nothing" if os.path.islink(run_dir) else "a file"
        return unreadable(name, f"is {what}, not a run folder; move it aside", seen)
    view: RunView | None = None
    try:
        rundir.check_run_folder(run_dir)
        events = list(read_typed(rundir.journal_path(run_dir)))
        view = fold(events)
        result = read_result(run_dir)
        if result is not None:
            alive: bool | None = False
        else:
            alive = controller_alive(run_dir) if where is None else where.alive
        goodput = run_goodput(events, result, now if alive else None)
    except DamagedFile as exc:
        # A copy of the store's is no file to remove here.
        fix = f"; {exc.fix}" if exc.fix == REMOVE and where is None else ""
        return unreadable(name, f"{os.path.relpath(exc.path, run_dir)}: {exc.problem}{fix}", seen, view)
    except OSError as exc:
        return unreadable(name, f"cannot be read ({exc.strerror or type(exc).__name__})", seen, view)
    # Only an unfinished run's control channel is asked: result.json says a finished one's step.
    progress = live_progress(run_dir, view, where) if result is None else None
    row = row_from(name, view, result, progress, alive, now, seen, goodput)
    if where is not None and row.status == CONTROLLER_DIED:
        return replace(row, reason=f"no controller holds its lease in the control store; {where.go_on}")
    if where is not None and result is None and alive is None:
        return replace(
            row, reason="cannot tell whether its controller runs (its lease in the control store cannot be read)"
        )
    return row


def list_runs(home: str, now: float | None = None) -> list[RunRow]:
    """Every run under ``home``, newest first; none when home or its runs folder is
    missing. DamagedFile when ``home/runs`` is no folder that can be listed."""
    runs_dir = rundir.runs_path(home)
    try:
        names = os.listdir(runs_dir)
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise DamagedFile(runs_dir, "is a file, not the folder of runs") from None
    except PermissionError:
        raise DamagedFile(runs_dir, "cannot be read (permission denied)") from None
    at = time.time() if now is None else now
    # No run id starts with '.' (orchestrator.config.checks.NAME_RULE): such names are no runs.
    return newest_first(read_row(runs_dir, n, at) for n in names if not n.startswith("."))


def main(home: str, fmt: str) -> int:
    """``action=list``: a table for people, or JSON for scripts."""
    return show(list_runs(home), fmt, no_runs(home))


def show(rows: list[RunRow], fmt: str, empty: str) -> int:
    """The rows printed in ``fmt``; ``empty``: the line that says there are none."""
    import shutil
    import sys

    if fmt == "json":
        print(render_json(rows))
    elif not rows:
        print(empty)
    else:
        # On a terminal the notes under the table are cut to its width; piped, they stay whole.
        print(render_table(rows, shutil.get_terminal_size().columns if sys.stdout.isatty() else None))
    return 0
