"""The two data loaders side by side: the same training on a synthetic set big enough that loading matters.

Both runs train ``job=synthetic`` (data.samples x data.features float32 rows, made on
this machine once and cached) with 2 DDP workers through the orchestrator, one
with ``data.loader=sharded`` and one with ``data.loader=ray_data``, and report:

- steps/s and samples/s (all workers), from the workers' own telemetry;
- peak RSS of the busiest worker (the kernel's high-water mark), and the peak of
  all Ray processes' RSS added up, sampled here every 0.25 s (Ray Data's work runs
  outside the workers: read tasks, the split coordinator, the object store);
- bytes moved: the workers' TCP bytes (gloo's all-reduce, Ray's gRPC) and the
  read + write bytes of all Ray processes (``/proc/<pid>/io`` rchar + wchar: files,
  pipes and sockets; shared-memory object transfers are not I/O and are not counted).

``--search`` compares them under a search as well: for each loader, a Ray Tune search of
``--trials`` trials (a grid over ``job.lr``), each a Ray Train run of ``--trial-workers``
workers training ``--steps`` steps in ``--iterations`` iterations, one trial at a time
(each takes the cluster's CPUs). Each trial's figures add up its workers' telemetry
(result.json's ``telemetry.workers``, one entry per rank of each trial); the search's
wall time and the Ray processes' RSS and I/O are the whole search's.

    python benchmarks/data_loading.py [--steps 300] [--samples 200000] [--features 256]
        [--search [--trials 2] [--iterations 3] [--trial-workers 2]] [--json PATH]

``--json PATH`` writes each loader's figures as ``<loader>_<figure>`` and ray_data's
over sharded's as ``ray_data_ratio_<figure>`` (see ``figures``); with ``--search``, the
search's as ``search_<loader>_<figure>`` and ``search_ray_data_ratio_<figure>`` (a
trial's mean), and each trial's as ``search_<loader>_<trial>_<figure>``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from benchmarks.common import orchestrate, temp_home, write_json

LOADERS = ("sharded", "ray_data")


class RayWatch:
    """Peak summed RSS and the I/O counters of every Ray process on the machine, sampled."""

    def __init__(self, interval_s: float = 0.25) -> None:
        from tests.support.runs import ray_pids

        self.ray_pids = ray_pids
        self.interval_s = interval_s
        self.peak_rss = 0
        self.io: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RayWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            total = 0
            for pid in self.ray_pids():
                try:
                    p = psutil.Process(pid)
                    total += p.memory_info().rss
                    io = p.io_counters()
                    self.io[pid] = io.read_chars + io.write_chars
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            self.peak_rss = max(self.peak_rss, total)


def watched(home: str, run_id: str, loader: str, args: argparse.Namespace, *overrides: str) -> tuple[Any, ...]:
    """One orchestrated job=synthetic with ``loader`` on the set ``args`` name, the Ray
    processes watched throughout: (result.json, wall seconds, the watch)."""
    with RayWatch() as watch:
        t0 = time.time()
        result, _journal = orchestrate(
            home,
            run_id,
            "job=synthetic",
            f"data.loader={loader}",
            f"data.samples={args.samples}",
            f"data.features={args.features}",
            f"data.cache_dir={args.cache_dir}",
            *overrides,
        )
        wall = time.time() - t0
    return result, wall, watch


def added_up(workers: list[dict[str, Any]]) -> dict[str, Any]:
    """Workers' telemetry as one: samples/s and TCP bytes summed, CPU averaged, the busiest one's peak RSS."""
    return {
        "samples_per_s": sum(float(w["samples_per_s"]) for w in workers),
        "cpu_percent": sum(float(w["cpu_percent"]) for w in workers) / len(workers),
        "worker_peak_rss": max(int(w["peak_rss_bytes"]) for w in workers),
        "tcp_bytes": sum(int(w["net_bytes_sent"]) + int(w["net_bytes_recv"]) for w in workers),
    }


def one_run(home: str, loader: str, args: argparse.Namespace) -> dict[str, Any]:
    overrides = (f"job.steps={args.steps}", "checkpoint.interval_steps=100")
    result, wall, watch = watched(home, f"data-{loader}-{int(time.time())}", loader, args, *overrides)
    return {
        "loader": loader,
        "wall_s": wall,
        "steps_per_s": float(result["train_steps_per_s"]),
        **added_up(result["telemetry"]["workers"]),
        "ray_peak_rss": watch.peak_rss,
        "io_bytes": sum(watch.io.values()),
        "accuracy": float(result["metrics"]["accuracy"]),
    }


def one_search(home: str, loader: str, args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One search with ``loader``: (its summary row, one row per trial)."""
    lrs = " ".join(f"{0.02 * (i + 1):g}" for i in range(args.trials))
    result, wall, watch = watched(
        home,
        f"search-{loader}-{int(time.time())}",
        loader,
        args,
        "hpo.enabled=true",
        "hpo.scheduler=fifo",
        "hpo.grace_period=1",  # ASHA's (unused by fifo), checked against hpo.max_t all the same
        "hpo.num_samples=1",
        f"hpo.search_space.job.lr=grid {lrs}",
        f"hpo.trial.workers={args.trial_workers}",
        f"hpo.max_t={args.iterations}",
        f"hpo.steps_per_iteration={max(1, args.steps // args.iterations)}",
    )
    trials = trial_rows(result, loader)
    return search_summary(loader, trials, wall, watch.peak_rss, sum(watch.io.values())), trials


def trial_rows(result: dict[str, Any], loader: str) -> list[dict[str, Any]]:
    """One row per trial of a search's result.json: its workers' telemetry added up
    (``added_up``) and its accuracy. Pure: the tests drive it with results."""
    workers: dict[str, list[dict[str, Any]]] = {}
    for w in result["telemetry"]["workers"]:
        workers.setdefault(str(w["trial_id"]), []).append(w)
    accuracy = {str(t["trial_id"]): (t.get("metrics") or {}).get("accuracy") for t in result["trials"]}
    return [
        {
            "loader": loader,
            "trial": trial_id,
            "workers": len(ws),
            **added_up(ws),
            "accuracy": float(accuracy.get(trial_id) or 0.0),
        }
        for trial_id, ws in sorted(workers.items())
    ]


def search_summary(
    loader: str, trials: list[dict[str, Any]], wall_s: float, ray_peak_rss: int, io_bytes: int
) -> dict[str, Any]:
    """A search's row: its trials' mean of each per-trial figure, and the search's own
    wall time, Ray RSS peak and I/O."""
    if not trials:
        raise SystemExit(f"the {loader} search reported no trial's telemetry")

    def mean(key: str) -> float:
        return sum(float(t[key]) for t in trials) / len(trials)

    return {
        "loader": loader,
        "wall_s": wall_s,
        "samples_per_s": mean("samples_per_s"),
        "cpu_percent": mean("cpu_percent"),
        "worker_peak_rss": mean("worker_peak_rss"),
        "ray_peak_rss": ray_peak_rss,
        "tcp_bytes": mean("tcp_bytes"),
        "io_bytes": io_bytes,
        "accuracy": mean("accuracy"),
    }


COLUMNS = [
    ("loader", "loader", "{}"),
    ("wall_s", "wall s", "{:.1f}"),
    ("steps_per_s", "steps/s", "{:.1f}"),
    ("samples_per_s", "samples/s", "{:.0f}"),
    ("cpu_percent", "worker CPU %", "{:.0f}"),
    ("worker_peak_rss", "worker peak RSS MB", "{:.0f}"),
    ("ray_peak_rss", "all Ray RSS MB (peak)", "{:.0f}"),
    ("tcp_bytes", "worker TCP MB", "{:.1f}"),
    ("io_bytes", "Ray I/O MB", "{:.1f}"),
    ("accuracy", "accuracy", "{:.4f}"),
]
MB = ("worker_peak_rss", "ray_peak_rss", "tcp_bytes", "io_bytes")
# A search's columns: a trial's mean (workers summed as in a run), no steps/s of its own.
SEARCH_COLUMNS = [c for c in COLUMNS if c[0] != "steps_per_s"]
TRIAL_COLUMNS = [
    ("loader", "loader", "{}"),
    ("trial", "trial", "{}"),
    ("workers", "workers", "{}"),
    *(c for c in COLUMNS if c[0] in ("samples_per_s", "cpu_percent", "worker_peak_rss", "tcp_bytes", "accuracy")),
]


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]] = COLUMNS, ratio: bool = True) -> str:
    shown = []
    for r in rows:
        shown.append([fmt.format(r[k] / 1e6 if k in MB else r[k]) for k, _, fmt in columns])
    if ratio:
        a, b = rows
        shown.append(
            ["ray_data / sharded"]
            + [f"{b[k] / a[k]:.2f}x" if isinstance(a[k], int | float) and a[k] else "-" for k, _, _ in columns[1:]]
        )
    heads = [h for _, h, _ in columns]
    widths = [max(len(h), *(len(row[i]) for row in shown)) for i, h in enumerate(heads)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in shown:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return "\n".join(lines)


def json_name(key: str) -> str:
    """A column's JSON name: the MB columns say so (``tcp_bytes`` -> ``tcp_mb``)."""
    return f"{key.removesuffix('_bytes')}_mb" if key in MB else key


def figures(
    rows: list[dict[str, Any]], columns: list[tuple[str, str, str]] = COLUMNS, prefix: str = ""
) -> dict[str, Any]:
    """The flat figures of one comparison: every column of the table per loader
    (``sharded_steps_per_s``, ``ray_data_worker_peak_rss_mb``, ...; bytes in MB, as
    printed) and ``ray_data_ratio_<column>`` (ray_data / sharded, None where sharded's
    is 0), each name after ``prefix`` (``search_`` for the search's). Pure: the tests
    drive it with records."""
    out: dict[str, Any] = {}
    by_loader = {r["loader"]: r for r in rows}
    for loader, r in by_loader.items():
        for key, _, _ in columns[1:]:
            out[f"{prefix}{loader}_{json_name(key)}"] = round(r[key] / 1e6 if key in MB else float(r[key]), 4)
    a, b = by_loader["sharded"], by_loader["ray_data"]
    for key, _, _ in columns[1:]:
        out[f"{prefix}ray_data_ratio_{json_name(key)}"] = round(b[key] / a[key], 3) if a[key] else None
    return out


def trial_figures(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Each trial's figures, flat: ``search_<loader>_<trial>_<figure>`` (bytes in MB, as printed)."""
    out: dict[str, Any] = {}
    for t in trials:
        for key, _, _ in TRIAL_COLUMNS[2:]:
            value = t[key] / 1e6 if key in MB else t[key]
            out[f"search_{t['loader']}_{t['trial']}_{json_name(key)}"] = round(float(value), 4)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--features", type=int, default=256)
    ap.add_argument("--cache-dir", default=os.path.expanduser("~/.orchestrator/data"))
    ap.add_argument("--search", action="store_true", help="compare the loaders under a search too")
    ap.add_argument("--trials", type=int, default=2, help="a search's trials (a grid over job.lr)")
    ap.add_argument("--iterations", type=int, default=3, help="a search trial's iterations (--steps in all)")
    ap.add_argument("--trial-workers", type=int, default=2, help="a search trial's Ray Train workers")
    ap.add_argument("--json", metavar="PATH", help="write the figures and ratios there (flat keys)")
    args = ap.parse_args(argv)
    for name in ("trials", "iterations", "trial_workers"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be 1 or more")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from orchestrator.workloads.synthetic import ensure_dataset

    t0 = time.time()
    files = ensure_dataset(args.cache_dir, 0, args.samples, args.features)
    size = sum(os.path.getsize(f) for f in files)
    print(
        f"data set: {args.samples} rows x {args.features} features, {len(files)} parts, "
        f"{size / 1e6:.0f} MB on disk ({time.time() - t0:.1f}s to make or find)",
        flush=True,
    )
    home = temp_home()
    rows = []
    for loader in LOADERS:
        print(f"training {args.steps} steps with data.loader={loader} ...", flush=True)
        rows.append(one_run(home, loader, args))
    print(table(rows))
    found: dict[str, Any] = {}
    if args.search:
        searches, trials = [], []
        for loader in LOADERS:
            print(
                f"searching {args.trials} trials of {args.trial_workers} workers with data.loader={loader} ...",
                flush=True,
            )
            summary, rows_of = one_search(home, loader, args)
            searches.append(summary)
            trials.extend(rows_of)
        print("\nunder a search (per trial: its workers added up; wall, Ray RSS and I/O: the whole search)")
        print(table(trials, TRIAL_COLUMNS, ratio=False))
        print(table(searches, SEARCH_COLUMNS))
        found = {
            "search_trial_count": args.trials,
            "search_trial_workers": args.trial_workers,
            **figures(searches, SEARCH_COLUMNS, prefix="search_"),
            **trial_figures(trials),
        }
    write_json(
        args.json,
        {
            "steps": args.steps,
            "samples": args.samples,
            "features": args.features,
            "data_set_mb": round(size / 1e6, 1),
            **figures(rows),
            **found,
        },
    )


if __name__ == "__main__":
    main()
