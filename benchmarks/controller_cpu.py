"""The controller's own CPU while a run trains, as a fraction of one core.

Runs the digits job and samples the controller process's CPU time (user + system,
its own, not its children's: the clusters it starts are processes of their own) from
the first training step to the last, from the run's journal. The goal (issue 15):
at most 1% of a core in steady state, detection still within two heartbeat
intervals (``benchmarks/recovery.py`` measures that).

    python benchmarks/controller_cpu.py [--steps 6000] [--pool] [--json PATH]

``--pool``: the run waits on a standby pool's cluster (recovery.standby_pool, a control
store in the run's home, recovery.placement=cost), the controller renewing its
membership and reading the pool every 2 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import REPO, temp_home, write_json
from tests.support.runs import env_for

GOAL = 0.01


def journal_times(run_dir: Path) -> tuple[float | None, float | None]:
    """When training started (the first train_started) and ended (run_finished), if yet."""
    started = ended = None
    path = run_dir / "journal.jsonl"
    if not path.exists():
        return None, None
    for line in path.read_text().splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # a line being written
        if ev.get("type") == "runtime.train_started" and started is None:
            started = float(ev.get("time", ev["ts"]))
        elif ev.get("type") in ("attempt_ended", "run_finished") and ended is None and started is not None:
            ended = float(ev["ts"])
    return started, ended


def cpu_fraction(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    """CPU seconds per wall second between ``start`` and ``end``, from (wall, cpu) samples."""
    inside = [(w, c) for w, c in samples if start <= w <= end]
    if len(inside) < 2 or inside[-1][0] - inside[0][0] <= 0:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def split(samples: list[tuple[float, float, float]]) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(wall, user, system) samples as (wall, user) and (wall, system) ones."""
    return [(w, u) for w, u, _ in samples], [(w, s) for w, _, s in samples]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--pool", action="store_true", help="with a standby pool and placement by cost")
    ap.add_argument("--json", metavar="PATH", help="write the figures there (flat keys)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    home = Path(temp_home())
    run_id = "controller-cpu"
    argv_run = [sys.executable, "-m", "orchestrator", "job=digits", f"run_id={run_id}", "progress=false"]
    argv_run.append(f"job.steps={args.steps}")
    extra: dict[str, str] = {}
    if args.pool:
        argv_run += [
            f"cloud.control_store=file://{home}/control",
            "recovery.standby_pool=bench",
            "recovery.placement=cost",
        ]
        extra["ORCHESTRATOR_CONTROL_KEY"] = "b" * 64
    env = env_for(home, extra)
    proc = subprocess.Popen(argv_run, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    me = psutil.Process(proc.pid)
    samples: list[tuple[float, float, float]] = []
    while proc.poll() is None:
        try:
            t = me.cpu_times()
            samples.append((time.time(), t.user, t.system))
        except psutil.Error:
            break
        time.sleep(0.5)
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"the run failed ({proc.returncode}): {err.decode()[-2000:]}")
    started, ended = journal_times(home / "runs" / run_id)
    if started is None or ended is None:
        raise SystemExit("the journal has no training window")
    frac = cpu_fraction([(w, u + s) for w, u, s in samples], started, ended)
    if frac is None:
        raise SystemExit("too few samples inside the training window")
    user, system = (cpu_fraction(part, started, ended) or 0.0 for part in split(samples))
    figures: dict[str, Any] = {
        "controller_cpu_frac": round(frac, 4),
        # The kernel's share (file reads, fsyncs, wakeups) and Python's, apart.
        "controller_user_frac": round(user, 4),
        "controller_system_frac": round(system, 4),
        "training_s": round(ended - started, 2),
        "steps": args.steps,
        "pool": args.pool,
    }
    print(
        f"training {figures['training_s']:.1f}s; controller CPU {frac * 100:.2f}% of one core "
        f"(user {user * 100:.2f}%, system {system * 100:.2f}%; goal <= 1%: ",
        end="",
    )
    print("met)" if frac <= GOAL else "not met)")
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
