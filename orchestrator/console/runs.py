"""The runs page's rows: ``action=list``'s rows (``orchestrator.commands.runs_list``), each
with its stores' newest verified checkpoints, kept between the page's polls.

``list_runs`` reads every run of the home from its files each time; the page asks every
2 s. So the home is read as ``list_runs`` reads it (``read_row``, one run at a time, the
same names, ``newest_first``), and an ended run's row is kept while its journal and
result.json stay as they were: an ended run's row is made of those two files alone
(``row_from``). A run that has not ended is read again at every poll (its controller's
lock and live step are news no file's size tells).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from orchestrator.commands import runs_list
from orchestrator.commands.goodput_text import dollars
from orchestrator.commands.runs_list import RunRow, fmt_started, fmt_step
from orchestrator.console.checkpoints import StoreCheckpoint, store_checkpoints
from orchestrator.console.text import age, cut
from orchestrator.runstate import rundir
from orchestrator.runstate.journal import typed_lines
from orchestrator.runstate.runfiles import DamagedFile, lines
from recovery.boundedjson import MAX_BYTES

# A file's identity and contents as far as a stat tells: (inode, size, mtime_ns), None: absent.
Stamp = tuple[int, int, int] | None


def stamp(path: str) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def run_stamp(run_dir: str) -> tuple[Stamp, Stamp, Stamp]:
    """What an ended run's row is made of: its folder, journal and result.json."""
    return stamp(run_dir), stamp(rundir.journal_path(run_dir)), stamp(rundir.result_path(run_dir))


# Every line the stores' fold acts on names one of these (its type); the rest are not decoded.
_STORE_WORDS = (b"checkpoint_committed", b"replicated", b"checkpoint_skipped")


def read_stores(run_dir: str) -> dict[str, StoreCheckpoint]:
    """The run's stores from its journal: the lines of the events the fold takes, typed as
    ``read_typed`` types them (a run's row has just read the whole journal: this second
    read decodes what it needs alone). None when the journal cannot be read: its row says why."""
    path = rundir.journal_path(run_dir)
    try:
        wanted = ((n, raw) for n, raw in lines(path, MAX_BYTES) if any(w in raw for w in _STORE_WORDS))
        return store_checkpoints(typed_lines(path, wanted))
    except (DamagedFile, OSError):
        return {}


@dataclass
class _Kept:
    row_stamp: tuple[Stamp, Stamp, Stamp]
    row: RunRow
    stores_stamp: Stamp
    stores: dict[str, StoreCheckpoint] = field(default_factory=dict)


class HomeRuns:
    """The rows of every run under ``home``, newest first, read again only where its
    files changed (an ended run) or always (a run going on). Safe to share between the
    server's threads: a row read twice at once is read the same."""

    def __init__(self, home: str, read_row: Callable[[str, str, float], RunRow] = runs_list.read_row) -> None:
        self.home = home
        self._read_row = read_row
        self._kept: dict[str, _Kept] = {}
        self._lock = threading.Lock()
        # Held while the server's start reads every run once (``warm``): a page asked meanwhile
        # waits for it and finds the runs read, instead of reading them all a second time.
        self._first = threading.Lock()

    def warm(self) -> None:
        """Read every run once, as the console starts, before anyone asks."""
        with self._first:
            try:
                self._rows(time.time())
            except DamagedFile:
                pass  # said when the page asks

    def rows(self, now: float) -> list[tuple[RunRow, dict[str, StoreCheckpoint]]]:
        """Every run's row and stores; DamagedFile when home/runs is no folder to list."""
        with self._first:
            pass
        return self._rows(now)

    def _rows(self, now: float) -> list[tuple[RunRow, dict[str, StoreCheckpoint]]]:
        runs_dir = rundir.runs_path(self.home)
        try:
            names = os.listdir(runs_dir)
        except FileNotFoundError:
            names = []
        except NotADirectoryError:
            raise DamagedFile(runs_dir, "is a file, not the folder of runs") from None
        except PermissionError:
            raise DamagedFile(runs_dir, "cannot be read (permission denied)") from None
        # As list_runs: no run id starts with '.'.
        names = [n for n in names if not n.startswith(".")]
        with self._lock:
            kept = dict(self._kept)
        fresh = {name: self._row(runs_dir, name, now, kept.get(name)) for name in names}
        with self._lock:
            self._kept = fresh
        rows = runs_list.newest_first(k.row for k in fresh.values())
        return [(r, fresh[r.run_id].stores) for r in rows]

    def _row(self, runs_dir: str, name: str, now: float, kept: _Kept | None) -> _Kept:
        run_dir = os.path.join(runs_dir, name)
        stamps = run_stamp(run_dir)
        ended = stamps[2] is not None
        if kept is not None and ended and kept.row_stamp == stamps:
            return kept
        row = self._read_row(runs_dir, name, now)
        stores_stamp = stamps[1]
        if kept is not None and kept.stores_stamp == stores_stamp and stores_stamp is not None:
            stores = kept.stores
        else:
            stores = read_stores(run_dir) if row.status != runs_list.UNREADABLE else {}
        return _Kept(stamps, row, stores_stamp, stores)


def run_href(run_id: str) -> str:
    """The run page's path: the id quoted whole (a folder name may hold anything but '/')."""
    return "/runs/" + quote(run_id, safe="")


def progress_of(step: object, total: object) -> float | None:
    """How far a run got, 0..1 (None: no step, or nothing to count it against)."""
    if not isinstance(step, int) or not isinstance(total, int) or total <= 0:
        return None
    return max(0.0, min(1.0, step / total))


def checkpoint_cells(stores: dict[str, StoreCheckpoint], now: float) -> list[dict[str, Any]]:
    """Each store's newest checkpoint, for the table: its region, step and age."""
    return [
        {
            "region": cut(s.region, 100),
            "step": s.step,
            "age_s": s.age_s(now),
            "text": f"{cut(s.region, 100)}: step {s.step}, {age(s.age_s(now))} ago" if s.step is not None else "-",
        }
        for s in stores.values()
    ]


def row_json(row: RunRow, stores: dict[str, StoreCheckpoint], now: float) -> dict[str, Any]:
    """A row as the API gives it: ``action=list --format json``'s keys, bounded, with the
    stores' checkpoints, the progress, the run page's path, and each cell's text as the
    page shows it (the script only puts text where it goes)."""
    plain = row.as_json()
    for key in ("run_id", "job", "region", "status"):
        if plain.get(key) is not None:
            plain[key] = cut(plain[key], 255 if key == "run_id" else 100)
    plain["reason"] = cut(row.reason) if row.reason else ""
    cost = dollars(row.cost_usd) if row.cost_usd is not None else ("?" if row.unpriced else "-")
    return {
        **plain,
        "progress": progress_of(row.step, row.total),
        "checkpoints": checkpoint_cells(stores, now),
        "href": run_href(row.run_id),
        "text": {
            "step": fmt_step(row.step, row.total),
            "started": fmt_started(row.started_at),
            "duration": age(row.duration_s),
            "goodput": "-" if row.goodput is None else f"{100 * row.goodput:.0f}%",
            "cost": cost,
            "incidents": "-" if row.incidents is None else str(row.incidents),
        },
    }


def statuses(rows: list[dict[str, Any]]) -> list[str]:
    """The statuses there are, for the filter: the run states first, then the rest, sorted."""
    order = ["PENDING", "PROVISIONING", "RUNNING", "RECOVERING", "SUCCEEDED", "FAILED", "INTERRUPTED", "CANCELLED"]
    seen = {str(r["status"]) for r in rows}
    return [s for s in order if s in seen] + sorted(seen - set(order))


def runs_json(
    home_runs: HomeRuns,
    now: float,
    status: str | None = None,
    more: list[tuple[RunRow, dict[str, StoreCheckpoint]]] | None = None,
) -> dict[str, Any]:
    """``/api/runs``: the rows (only those of ``status`` when given), the statuses to filter
    by, and how many runs there are in all; ``more``: the control store's runs, after."""
    local = home_runs.rows(now)
    mine = {r.run_id for r, _ in local}
    extra = [(r, s) for r, s in more or [] if r.run_id not in mine]
    rows = [row_json(r, s, now) for r, s in [*local, *extra]]
    shown = [r for r in rows if not status or r["status"] == status]
    return {"now": now, "total": len(rows), "status": status or "", "statuses": statuses(rows), "runs": shown}
