"""What a tracker costs a run: the same digits job with tracking=none and tracking=mlflow
(a real MLflow server this script starts on 127.0.0.1, sqlite and a local artifact
folder), one run each per round, interleaved. Printed: each run's wall time (the
command's, from start to result) and training throughput (result.json's
train_steps_per_s), and the ratios mlflow / none. The goal (issue 50): tracking adds at
most 1% to a run's wall time. No timed assertion: a 2-core machine shared with others
moves both figures by more than that between runs.

    python benchmarks/tracking.py [--steps 3000] [--rounds 1] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import orchestrate, temp_home, write_json

ARMS = ("none", "mlflow")
GOAL = 1.01  # wall time with tracking / without


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000, help="training steps of every run")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of both arms, interleaved")
    ap.add_argument("--json", default=None, help="write the figures here too")
    return ap.parse_args(argv)


def overrides(arm: str, steps: int, uri: str | None) -> list[str]:
    out = [f"job.steps={steps}"]
    if arm == "mlflow":
        assert uri is not None
        out += ["tracking=mlflow", f"tracking.uri={uri}"]
    return out


def figures(runs: dict[str, list[tuple[float, float | None]]]) -> dict[str, Any]:
    """Per arm the median wall time and throughput; the ratios mlflow / none (per round,
    then the median)."""
    out: dict[str, Any] = {}
    for arm, rounds in runs.items():
        rates = [s for _, s in rounds if s is not None]
        out[f"{arm}_wall_s"] = statistics.median(w for w, _ in rounds)
        out[f"{arm}_steps_per_s"] = statistics.median(rates) if rates else None
    pairs = list(zip(runs["none"], runs["mlflow"], strict=False))
    out["wall_ratio"] = statistics.median(m[0] / n[0] for n, m in pairs) if pairs else None
    rates = [(n[1], m[1]) for n, m in pairs if n[1] and m[1]]
    out["throughput_ratio"] = statistics.median(m / n for n, m in rates) if rates else None
    out["goal_wall_ratio"] = GOAL
    return out


def table(f: dict[str, Any]) -> str:
    rows = [f"{'arm':<8} {'wall s':>8} {'steps/s':>9}"]
    for arm in ARMS:
        sps = f[f"{arm}_steps_per_s"]
        rows.append(f"{arm:<8} {f[f'{arm}_wall_s']:>8.1f} {'-' if sps is None else round(sps, 1):>9}")
    ratio, thr = f["wall_ratio"], f["throughput_ratio"]
    rows.append(f"wall time mlflow / none: {ratio:.4f} (goal <= {GOAL})")
    if thr is not None:
        rows.append(f"throughput mlflow / none: {thr:.4f}")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    from tests.support.trackers import start_mlflow

    args = parse_args(argv)
    home = temp_home()
    server = start_mlflow(Path(tempfile.mkdtemp(prefix="orch-bench-mlflow-")))
    runs: dict[str, list[tuple[float, float | None]]] = {arm: [] for arm in ARMS}
    try:
        for i in range(args.rounds):
            for arm in ARMS:
                began = time.monotonic()
                result, _ = orchestrate(home, f"track-{arm}-{i}", *overrides(arm, args.steps, server.uri))
                runs[arm].append((time.monotonic() - began, result.get("train_steps_per_s")))
    finally:
        server.stop()
    f = figures(runs)
    print(table(f))
    write_json(args.json, {"steps": args.steps, "rounds": args.rounds, **f})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
