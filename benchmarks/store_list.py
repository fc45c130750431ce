"""Listing a control store's runs from another machine: ``action=list`` with
``cloud.control_store`` (orchestrator/commands/remote.py).

Writes N synthetic runs (default 1000) as controllers write and mirror them (typed
journal events, config.json, result.json, a loss series; tests/support/mirrored.py) to a
temporary ``file://`` control store: most finished, some still going (their lease held)
and some whose controller is gone. Then times, from a fresh home, reading them all
(``store_runs``: each run's newest mirror verified and copied into a temporary home,
and its list row read) and the whole ``action=list`` (the table, printed to nowhere).
The goal (issue 49): at most 2 s for 1000 runs.

    python benchmarks/store_list.py [--runs 1000] [--losses 200] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import temp_home, write_json

GOAL_S = 2.0
KEY = "b" * 64


def kind_of(i: int) -> str | None:
    """The i-th run's end: 7 in 10 succeeded, 2 failed, 1 still going (no result.json)."""
    return {0: None, 1: "FAILED", 2: "FAILED"}.get(i % 10, "SUCCEEDED")


def make_store(root: Path, runs: int, losses: int) -> str:
    """``runs`` mirrored runs in ``root/control``, written from ``root/elsewhere``; the URL."""
    from tests.support.mirrored import hold_lease, mirror, write_run

    store = f"file://{root}/control"
    home = root / "elsewhere"
    for i in range(runs):
        run_id = f"bench-{i:05d}"
        ended = kind_of(i)
        mirror(write_run(home, run_id, store, ended=ended, losses=losses), store, KEY.encode())
        if ended is None and i % 20 == 0:
            hold_lease(store, KEY.encode(), run_id)  # half of those still going: a controller lives
    return store


def time_read(store: str) -> tuple[float, int, dict[str, int]]:
    """Seconds to read every run of the store into list rows; how many; by status."""
    from orchestrator.commands.remote import store_runs

    start = time.perf_counter()
    with store_runs(store, {}, KEY.encode()) as found:
        rows = found.rows()
    took = time.perf_counter() - start
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row.status] = statuses.get(row.status, 0) + 1
    return took, len(rows), statuses


def time_list(store: str, home: Path) -> tuple[float, int]:
    """Seconds for ``action=list`` from a fresh home (config, read, table), and its exit status."""
    from orchestrator.__main__ import main

    os.environ["ORCHESTRATOR_CONTROL_KEY"] = KEY  # taken out of the environment as it is read
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["action=list", f"home={home}", f"cloud.control_store={store}"])
    return time.perf_counter() - start, code


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000, help="runs in the store")
    ap.add_argument("--losses", type=int, default=200, help="loss points per run (a list does not read them)")
    ap.add_argument("--json", metavar="PATH", help="write the figures there (flat keys)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    root = Path(temp_home())
    try:
        start = time.perf_counter()
        store = make_store(root, args.runs, args.losses)
        made = time.perf_counter() - start
        # Imports and first calls paid once, as a command pays them: not part of either figure.
        time_read(store)
        read_s, rows, statuses = time_read(store)
        list_s, code = time_list(store, root / "fresh-home")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if code != 0 or rows != args.runs:
        raise SystemExit(f"action=list exited {code} with {rows} of {args.runs} runs")
    figures: dict[str, Any] = {
        "runs": args.runs,
        "store_read_s": round(read_s, 3),
        "list_command_s": round(list_s, 3),
        "goal_s": GOAL_S,
        "ratio_to_goal": round(list_s / GOAL_S, 3),
        "per_run_ms": round(1000 * list_s / max(1, args.runs), 3),
        "statuses": ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())),
    }
    print(
        f"{args.runs} runs mirrored in {made:.1f}s; read from the store in {read_s:.2f}s, "
        f"action=list in {list_s:.2f}s ({figures['ratio_to_goal']:.2f}x the {GOAL_S:.0f} s goal: "
        f"{'met' if list_s <= GOAL_S else 'not met'}); {figures['statuses']}"
    )
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
