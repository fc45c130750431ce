"""The console's view of a control store (``cloud.control_store``): the runs this home
does not hold, from their verified mirrors (orchestrator/commands/remote.py), read again
every REFRESH_S in a thread of their own and kept in a private folder laid out as a home,
so that the run pages read them as they read this home's. A run whose mirror does not
verify is a row that says so and nothing else. Nothing of the store's is acted on: a stop
or a drill goes to a run's controller through its own machine's folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from orchestrator.commands.remote import SHOWN, StoreError, StoreRun, store_runs
from orchestrator.commands.runs_list import RunRow
from orchestrator.console.checkpoints import StoreCheckpoint
from orchestrator.console.runs import read_stores
from orchestrator.runstate import rundir
from recovery.controlkey import ControlKeyError

REFRESH_S = 15.0
STORE = "store"


class StoreView:
    """The store's runs, as the console shows them; ``error``: why the store could not be
    read at the last refresh (its runs as they were read before stay shown)."""

    def __init__(
        self,
        store: str,
        options: dict[str, Any] | None,
        key: bytes,
        local_ids: Callable[[], set[str]],
        limit: int = 1000,
    ) -> None:
        self.store, self.options, self._key, self.limit = store, dict(options or {}), key, limit
        self.local_ids = local_ids
        self.home = tempfile.mkdtemp(prefix="orchestrator-console-store-")  # 0700, this user's alone
        os.mkdir(rundir.runs_path(self.home), 0o700)
        self.error = ""
        self._lock = threading.Lock()
        self._rows: list[tuple[RunRow, dict[str, StoreCheckpoint]]] = []
        self._runs: dict[str, StoreRun] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="console-store", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(REFRESH_S)

    def refresh(self) -> None:
        """Read the store again; its runs' folders here replaced by the new copies."""
        now = time.time()
        try:
            with store_runs(
                self.store, self.options, self._key, self.limit, skip=self.local_ids(), files=SHOWN
            ) as found:
                runs_dir = rundir.runs_path(self.home)
                for run_id in found.runs:
                    _replace_folder(rundir.run_path(found.home, run_id), os.path.join(runs_dir, run_id))
                for gone in set(os.listdir(runs_dir)) - set(found.runs):
                    shutil.rmtree(os.path.join(runs_dir, gone), ignore_errors=True)
                rows = [replace(r, source=STORE) for r in found.rows(now)]
                runs = dict(found.runs)
        except (StoreError, ControlKeyError, OSError) as exc:
            with self._lock:
                self.error = str(exc)[:300]
            return
        shown = []
        for row in rows:
            run_dir = rundir.run_path(self.home, row.run_id)
            stores = read_stores(run_dir) if row.run_id in runs else {}
            shown.append((row, stores))
        with self._lock:
            self._rows, self._runs, self.error = shown, runs, ""

    def rows(self) -> list[tuple[RunRow, dict[str, StoreCheckpoint]]]:
        with self._lock:
            return list(self._rows)

    def run(self, run_id: str) -> StoreRun | None:
        with self._lock:
            return self._runs.get(run_id)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        shutil.rmtree(self.home, ignore_errors=True)


def _replace_folder(src: str, dest: str) -> None:
    """``dest`` becomes a copy of ``src`` whole (a reader sees the old folder or the new)."""
    staged = dest + ".new"
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(src, staged)
    old = dest + ".old"
    if os.path.isdir(dest):
        shutil.rmtree(old, ignore_errors=True)
        os.rename(dest, old)
    os.rename(staged, dest)
    shutil.rmtree(old, ignore_errors=True)
