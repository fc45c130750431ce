"""How long ``action=console``'s runs page takes for a home of many runs.

    python benchmarks/console.py [--runs 1000] [--repeat 5] [--json PATH]

Makes a home of ``--runs`` synthetic runs (tests/support/console_runs.py: journals of typed
events, loss series and result.json, as a controller writes them; one run in ten left
without a result, as a run whose controller died), then asks the console's app for the
runs page's JSON (``/api/runs``, what the page polls every 2 s) and its HTML (``/``), in
this process, through the app's own routing, guard and templates (no socket: what is
timed is the console's work, not a network's). Each is timed cold (a console just
started, before its own start has read the home: every run read) and warm (the first page
once the start's read is done, and every poll after: ended runs kept). ``action=list``'s own
read of the same home (``list_runs``) is timed beside them. The goal: the page within 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

GOAL_S = 2.0
# The shapes of the home's runs, in turn: mostly ended ones, one in ten not (its controller gone).
MIX = ("clean", "failover", "clean", "failed", "clean", "interrupted", "failover", "clean", "clean", "running")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1000, help="synthetic runs in the home (default 1000)")
    p.add_argument("--repeat", type=int, default=5, help="warm polls timed, the median taken (default 5)")
    p.add_argument("--json", default=None, help="write the figures here as JSON")
    return p.parse_args(argv)


def asgi_get(app: Any, path: str, cookie: str = "") -> tuple[int, bytes]:
    """One GET through the ASGI app, in this process: its status and body."""
    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [(b"host", b"127.0.0.1"), *([(b"cookie", cookie.encode())] if cookie else [])],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    status, body = 0, bytearray()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    asyncio.run(app(scope, receive, send))
    return status, bytes(body)


Timing = tuple[float, float]  # (wall seconds, CPU seconds of this process, every thread)


def timed(get: Callable[[], tuple[int, bytes]]) -> Timing:
    t0, c0 = time.perf_counter(), time.process_time()
    status, body = get()
    took = (time.perf_counter() - t0, time.process_time() - c0)
    if status != 200:
        raise SystemExit(f"the console answered {status}: {body[:300]!r}")
    return took


def median(timings: list[Timing]) -> Timing:
    return statistics.median(t[0] for t in timings), statistics.median(t[1] for t in timings)


def figures(runs: int, m: dict[str, Timing], load: float | None = None) -> dict[str, Any]:
    """The figures --json writes: each time's wall and CPU seconds, and the page's worst
    over the goal, cold and warm. The CPU seconds say what the wall ones would be on an
    idle machine (the console's work is one thread at a time): a busy one stretches the wall."""
    out: dict[str, Any] = {"runs": runs, "goal_s": GOAL_S, "load_average": load}
    for name, (wall, cpu) in m.items():
        out[f"{name}_s"] = round(wall, 3)
        out[f"{name}_cpu_s"] = round(cpu, 3)
    cold = max(m["api_cold"][0], m["html_cold"][0])
    cold_cpu = max(m["api_cold"][1], m["html_cold"][1])
    warm = max(m["api_warm"][0], m["html_warm"][0])
    out.update(
        # What the console adds to action=list's own read of the home, cold.
        cold_over_list=round(cold / m["list_runs"][0], 3) if m["list_runs"][0] > 0 else None,
        ratio_cold=round(cold / GOAL_S, 3),
        ratio_cold_cpu=round(cold_cpu / GOAL_S, 3),
        ratio_warm=round(warm / GOAL_S, 3),
        goal_met=cold <= GOAL_S,
        goal_met_warm=warm <= GOAL_S,
    )
    return out


def measure(home: Path, repeat: int) -> dict[str, Timing]:
    """list_runs of the home, then each page cold (a console just built) and warm."""
    from orchestrator.commands.runs_list import list_runs
    from orchestrator.console.app import Console, build
    from orchestrator.console.security import Secrets

    m = {"list_runs": timed(lambda: (200, bytes(len(list_runs(str(home))))))}
    for name, path in (("api", "/api/runs"), ("html", "/")):
        keys = Secrets.new()
        app = build(Console(str(home), keys))  # a console just started: nothing read yet
        cookie = f"{keys.cookie}={keys.token}"
        m[f"{name}_cold"] = timed(lambda app=app, path=path, cookie=cookie: asgi_get(app, path, cookie))
        m[f"{name}_warm"] = median(
            [timed(lambda app=app, path=path, cookie=cookie: asgi_get(app, path, cookie)) for _ in range(repeat)]
        )
    return m


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from benchmarks.common import write_json
    from tests.support.console_runs import make_home

    home = Path(tempfile.mkdtemp(prefix="orch-console-bench-"))
    try:
        t0 = time.perf_counter()
        make_home(home, args.runs, time.time(), MIX)
        print(f"home of {args.runs} synthetic runs made in {time.perf_counter() - t0:.1f}s: {home}")
        m = measure(home, args.repeat)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    out = figures(args.runs, m, load)
    print(f"load average {load} on {os.cpu_count()} cores; wall seconds (CPU seconds)")
    print(f"action=list's read (list_runs): {m['list_runs'][0]:.3f}s ({m['list_runs'][1]:.3f}s)")
    for name, label in (("api", "/api/runs"), ("html", "/ (HTML)")):
        (cw, cc), (ww, wc) = m[f"{name}_cold"], m[f"{name}_warm"]
        print(f"{label}: cold {cw:.3f}s ({cc:.3f}s), warm {ww:.3f}s ({wc:.3f}s, median of {args.repeat})")
    met = {True: "met", False: "not met"}
    print(
        f"page / {GOAL_S:.0f} s goal: {out['ratio_cold']:.2f} cold ({met[out['goal_met']]}; CPU "
        f"{out['ratio_cold_cpu']:.2f}), {out['ratio_warm']:.2f} warm ({met[out['goal_met_warm']]}); "
        f"cold / action=list's read: {out['cold_over_list']}"
    )
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
