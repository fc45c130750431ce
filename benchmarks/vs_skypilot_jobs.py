"""Side by side with SkyPilot managed jobs: the same job, the same fault, the same cluster.

On the CI Slurm cluster (``.ci/slurm/setup``: one node, entered twice in
``~/.slurm/config`` as ``orch-slurm-a`` and ``orch-slurm-b``), each trial trains the
digits model with a checkpoint every ``--interval`` steps and, once a checkpoint at step
>= ``--cancel-at`` exists, ``scancel``\\ s the Slurm allocation it runs in:

- **ours**: ``python -m orchestrator job=digits`` on the CI cloud (``cloud=ci_slurm``,
  the SkyPilot provider over both entries), which fails over to the other entry;
- **theirs**: a SkyPilot managed job (``sky jobs launch``) of one plain PyTorch process
  training the same model on the same data (a self-contained script, what a SkyPilot
  user writes), resuming from its newest checkpoint, with ``job_recovery:
  EAGER_NEXT_REGION`` over the same two entries and the jobs controller in
  consolidation mode (inside the API server, no controller cluster);
- **ours_standby**: ours with ``recovery=warm_standby``: while the run trains in one
  entry, a cluster in the other is up with the runtime's workers waiting; the scancel
  comes once the journal says it is ready, and the failover activates it. (The CI
  cluster's partition lets two allocations share the node's cores for this.)
- **ours_back**: ours, scancelled in the first entry and then, once it trains there, in
  the second: the failover back into the first entry launches under the run's cluster
  name for that entry again, and SkyPilot finds the node runtime the lost cluster left
  (kept until the run ends). Its second incident is the one measured; theirs always
  relaunches in the entry it lost, under the same name, so this is the like-for-like
  row (``rto_ratio_back_vs_skypilot``).

Reported per system (medians over ``--trials``): detection (scancel to the system's
decision: our ``failure_detected``, their ``RECOVERING`` event), cluster up (to our
``provisioned``, their ``RUNNING`` after it), RTO (to the first training step after
the restore), lost steps (trained before the scancel, not in the restored checkpoint),
exact weights (ours against our uninterrupted run on the local provider; theirs against
their script's uninterrupted run) and wall time (launch to done). After detection, each
phase's own seconds, side by side (``AFTER``): the launch, the start (ours: the runtime
and Ray Train's worker group; theirs: their process and its restore), our restore, and
the first step.

**The network probe.** SkyPilot's jobs controller checks that the machine is online
before every status poll by sending HEAD requests to two public addresses
(``_TEST_IP_LIST`` in ``sky/backends/backend_utils.py``); offline it waits forever
("Network is not available") and never looks at the job. This benchmark starts its own
API server for their side with a ``sitecustomize`` on that server's ``PYTHONPATH``
which points that list at the server's own ``/docs`` URL, in that process (and the
controllers it starts) only; the installed package is not edited. Our side needs no
such thing: its provider asks Slurm and SkyPilot's status directly.

    .ci/slurm/setup   # once, as root
    python benchmarks/vs_skypilot_jobs.py [--trials 4] [--steps 1500] [--standby-steps 30000] [--cancel-at 150]
        [--systems ours,ours_standby,ours_back,skypilot] [--lock /tmp/orch-ray.lock] [--json PATH]

``--lock PATH``: each measurement (a trial, a baseline) holds an flock on PATH, so other
Ray users of the machine wait for it and it for them. A trial of either system takes
3-5 minutes here.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import json
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import REPO, write_json

# CI's Slurm cluster as the on-prem tests use it.
from tests.support.onprem import CLOUD, SETUP, SHARED, SKY_CONFIG, scancel, squeue

NODE_PYTHON = "/opt/orch-slurm/venv/bin/python"
REGIONS = ("orch-slurm-a", "orch-slurm-b")
RUN_TIMEOUT_S = 1200.0
# ours_standby: ours with recovery=warm_standby (the other entry's cluster up and its
# runtime waiting before the scancel).
# ours_back: ours, scancelled in the first entry, then in the second once it trains there:
# the failover back into the first entry launches under the run's name for it again and
# finds the runtime its lost cluster left (the second incident is the one measured).
SYSTEMS = ("ours", "ours_standby", "ours_back", "skypilot")
# The phases each system's row has, in the table's order.
PHASES = ("detect", "cluster_up", "rto", "wall")
# After detection, each phase's own seconds (``after_<phase>`` in a row), where the two
# systems spend the time between noticing the loss and training again:
# - launch: ours the decision to ``provisioned`` (a Slurm allocation, SkyPilot's node
#   runtime, Ray); theirs RECOVERING to RUNNING;
# - start: ours ``provisioned`` to the runtime's ``workers_ready`` (the runtime, Ray
#   Train's worker group, the model built); theirs RUNNING to their script's restored
#   line (its process, torch imported, its checkpoint loaded: their restore is in here);
# - restore: ours ``workers_ready`` to ``train_started`` (the checkpoint chosen, read,
#   verified, loaded); theirs none apart;
# - first_step: ``train_started`` (theirs: restored) to the first step trained.
AFTER = ("launch", "start", "restore", "first_step")

# Their job: one plain PyTorch process, the digits MLP of conf/job/digits.yaml (same
# data, split, model, optimizer, batch size, learning rate), a checkpoint every
# --interval steps written atomically, resumed from the newest at start. Each step's
# time goes to progress.log (the benchmark reads the restore and the first step from it).
TRAIN_SCRIPT = r"""
import argparse, gzip, hashlib, json, os, time
import numpy as np, torch
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--dir", required=True)
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--interval", type=int, required=True)
a = ap.parse_args()
os.makedirs(a.dir, exist_ok=True)
log = open(os.path.join(a.dir, "progress.log"), "a", buffering=1)
import sklearn.datasets as _d  # only for the path of its bundled file
with gzip.open(os.path.join(os.path.dirname(_d.__file__), "data", "digits.csv.gz"), "rt") as fh:
    data = np.loadtxt(fh, delimiter=",")
x = torch.from_numpy((data[:, :-1] / 16.0).astype(np.float32))
y = torch.from_numpy(data[:, -1].astype(int)).long()
order = torch.from_numpy(np.random.RandomState(0).permutation(len(x)))
tr = order[round(len(x) * 0.25):]
x, y = x[tr], y[tr]
# One thread wherever it runs: SkyPilot's task environment sets OMP_NUM_THREADS=1, a
# shell here does not, and a different thread count is a different float summation.
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
steps = sorted(int(n[5:-3]) for n in os.listdir(a.dir) if n.startswith("step-") and n.endswith(".pt"))
start = 0
if steps:
    state = torch.load(os.path.join(a.dir, f"step-{steps[-1]}.pt"), weights_only=True)
    model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
log.write(f"restored {start} {time.time():.6f}\n")
for step in range(start + 1, a.steps + 1):
    g = torch.Generator().manual_seed(step)
    idx = torch.randint(len(x), (64,), generator=g)
    opt.zero_grad()
    nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
    opt.step()
    log.write(f"step {step} {time.time():.6f}\n")
    if step % a.interval == 0 or step == a.steps:
        tmp = os.path.join(a.dir, f".step-{step}.pt.tmp")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
        os.replace(tmp, os.path.join(a.dir, f"step-{step}.pt"))
h = hashlib.sha256()
for k, v in sorted(model.state_dict().items()):
    h.update(k.encode()); h.update(v.detach().cpu().contiguous().numpy().tobytes())
with open(os.path.join(a.dir, "result.json"), "w") as fh:
    json.dump({"weights_sha256": h.hexdigest(), "final_step": a.steps}, fh)
"""

# The sitecustomize on their API server's PYTHONPATH: once sky.backends.backend_utils is
# imported, its network probe asks the local API server (ORCH_BENCH_PROBE_URL) instead of
# public addresses this offline machine cannot reach.
PROBE_SITECUSTOMIZE = r"""
import importlib.abc, importlib.util, os, sys

_URL = os.environ.get("ORCH_BENCH_PROBE_URL")
_NAME = "sky.backends.backend_utils"


class _PointProbeHome(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _NAME or not _URL:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module._TEST_IP_LIST = [_URL]

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PointProbeHome())
"""


# --- pure parts: timestamps into phases, phases into figures ------------------------------


def event_time(value: Any) -> float:
    """A ``job_events.timestamp`` as epoch seconds: SkyPilot stores ``datetime.now()``
    (naive, local time) through SQLAlchemy, which SQLite keeps as text."""
    if isinstance(value, int | float):
        return float(value)
    when = datetime.datetime.fromisoformat(str(value).strip())
    return when.timestamp()  # naive: local time, as it was written


def progress_times(lines: list[str]) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """Their script's progress.log: ([(restored step, time)], [(step, time)]) in order; a
    torn last line (the allocation cancelled mid-write) is skipped."""
    restores: list[tuple[int, float]] = []
    steps: list[tuple[int, float]] = []
    for line in lines:
        parts = line.split()
        if len(parts) != 3 or parts[0] not in ("restored", "step"):
            continue
        try:
            entry = (int(parts[1]), float(parts[2]))
        except ValueError:
            continue
        (restores if parts[0] == "restored" else steps).append(entry)
    return restores, steps


def skypilot_trial(
    events: list[tuple[str, float]], progress: list[str], cancelled_at: float, launched_at: float, done_at: float
) -> dict[str, Any]:
    """One trial of their side: ``events`` the job's (status, time) from ``job_events``,
    ``progress`` their script's log lines; times in seconds from the scancel."""
    after = [(s, t) for s, t in events if t >= cancelled_at]
    recovering = next((t for s, t in after if s == "RECOVERING"), None)
    if recovering is None:
        raise ValueError("no RECOVERING event after the scancel: the managed job never saw its cluster go")
    running = next((t for s, t in after if s == "RUNNING" and t >= recovering), None)
    restores, steps = progress_times(progress)
    restored = next(((s, t) for s, t in restores if t >= cancelled_at), None)
    if restored is None:
        raise ValueError("their script never restarted after the scancel")
    first = next((t for s, t in steps if t >= restored[1]), None)
    before = [s for s, t in steps if t <= cancelled_at]
    return {
        "detect": recovering - cancelled_at,
        "cluster_up": None if running is None else running - cancelled_at,
        "rto": None if first is None else first - cancelled_at,
        "restored_step": restored[0],
        "lost_steps": max(0, max(before, default=0) - restored[0]),
        "wall": done_at - launched_at,
        **after_phases([recovering, running, restored[1], None, first]),
    }


def after_phases(marks: list[float | None]) -> dict[str, float | None]:
    """``after_<phase>`` of AFTER from the times each phase ends, the first one the
    detection's: [detected, launched, started, restored, first step]. A phase whose end
    or start is not known is None; a system with no such phase apart (theirs has no
    restore apart from its start) passes None for it and the next phase runs from the
    last known mark."""
    out: dict[str, float | None] = {}
    last = marks[0]
    for phase, end in zip(AFTER, marks[1:], strict=True):
        out[f"after_{phase}"] = None if end is None or last is None else round(end - last, 3)
        last = end if end is not None else last
    return out


def ours_trial(
    journal: list[dict[str, Any]], incident: dict[str, Any], cancelled_at: float, launched_at: float, done_at: float
) -> dict[str, Any]:
    """One trial of ours, from the run's journal and its one incident. Cluster up: the
    new attempt's ``provisioned``, or with a warm standby its ``standby_activated``."""
    detected = float(incident["detected_at"])

    def up(e: dict[str, Any]) -> bool:
        if float(e.get("ts", 0.0)) < detected:
            return False
        if e.get("type") == "provisioned":
            return e.get("purpose", "attempt") == "attempt"
        return e.get("type") == "standby_activated"

    provisioned = next((float(e["ts"]) for e in journal if up(e)), None)
    first = incident.get("first_step_at")

    def after(kind: str, since: float | None) -> float | None:
        """When the runtime's first ``kind`` after ``since`` was written (its own time)."""
        if since is None:
            return None
        times = (float(e.get("time", e["ts"])) for e in journal if e.get("type") == f"runtime.{kind}")
        return next((t for t in times if t >= since), None)

    ready = after("workers_ready", provisioned)
    started = after("train_started", ready)
    return {
        "detect": detected - cancelled_at,
        "cluster_up": None if provisioned is None else provisioned - cancelled_at,
        "rto": None if first is None else float(first) - cancelled_at,
        "restored_step": incident.get("restored_step"),
        "lost_steps": incident.get("lost_steps"),
        "wall": done_at - launched_at,
        **after_phases([detected, provisioned, ready, started, None if first is None else float(first)]),
    }


def _median(values: list[Any]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def figures(trials: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The flat figures: per system (``ours``, ``skypilot``) the median of each phase as
    ``<phase>_<system>_s`` (``rto_ours_s``, ``detect_skypilot_s``, ...), every trial's RTO,
    lost steps, how many trials ended with exact weights, and ours over theirs
    (``rto_ratio_vs_skypilot``; the goal is <= 0.5). Pure: the tests drive it with records."""
    out: dict[str, Any] = {}
    for system, rows in trials.items():
        out[f"trials_{system}"] = len(rows)
        for phase in PHASES + tuple(f"after_{p}" for p in AFTER):
            out[f"{phase}_{system}_s"] = _median([r.get(phase) for r in rows])
        out[f"lost_steps_{system}"] = _median([r.get("lost_steps") for r in rows])
        out[f"exact_weights_{system}"] = sum(1 for r in rows if r.get("exact") is True)
        out[f"rto_all_{system}"] = ",".join("-" if r.get("rto") is None else f"{r['rto']:.1f}" for r in rows)
    ours, theirs = out.get("rto_ours_s"), out.get("rto_skypilot_s")
    out["rto_ratio_vs_skypilot"] = round(ours / theirs, 3) if ours and theirs else None
    standby = out.get("rto_ours_standby_s")
    out["rto_ratio_standby_vs_skypilot"] = round(standby / theirs, 3) if standby and theirs else None
    # Theirs relaunches in the entry it lost, under the same name: like for like with ours_back.
    back = out.get("rto_ours_back_s")
    out["rto_ratio_back_vs_skypilot"] = round(back / theirs, 3) if back and theirs else None
    after_ours = None if ours is None or out.get("detect_ours_s") is None else ours - out["detect_ours_s"]
    after_theirs = None if theirs is None or out.get("detect_skypilot_s") is None else theirs - out["detect_skypilot_s"]
    out["after_detect_ours_s"] = None if after_ours is None else round(after_ours, 3)
    out["after_detect_skypilot_s"] = None if after_theirs is None else round(after_theirs, 3)
    return out


def table(fig: dict[str, Any], systems: tuple[str, ...]) -> str:
    """The printed table: one row per phase, one column per system."""

    def cell(value: Any, unit: str = "s") -> str:
        return "-" if value is None else (f"{value:.1f}{unit}" if isinstance(value, float) else f"{value}{unit}")

    names = {"detect": "detection", "cluster_up": "cluster up", "rto": "RTO", "wall": "wall time"}
    lines = [f"{'(median, s from scancel)':<26}" + "".join(f"{s:>14}" for s in systems)]
    for phase in PHASES:
        lines.append(f"{names[phase]:<26}" + "".join(f"{cell(fig.get(f'{phase}_{s}_s')):>14}" for s in systems))
    lines.append(f"{'after detection:':<26}")
    for phase in AFTER:
        row = "".join(f"{cell(fig.get(f'after_{phase}_{s}_s')):>14}" for s in systems)
        lines.append(f"{'  ' + phase.replace('_', ' '):<26}" + row)
    lines.append(f"{'lost steps':<26}" + "".join(f"{cell(fig.get(f'lost_steps_{s}'), ''):>14}" for s in systems))
    lines.append(
        f"{'exact weights':<26}"
        + "".join(f"{str(fig.get(f'exact_weights_{s}')) + '/' + str(fig.get(f'trials_{s}')):>14}" for s in systems)
    )
    lines.append(f"{'RTO of each trial':<26}" + "".join(f"{fig.get(f'rto_all_{s}') or '-':>14}" for s in systems))
    if fig.get("rto_ratio_vs_skypilot") is not None:
        lines.append(f"RTO ours / SkyPilot managed jobs = {fig['rto_ratio_vs_skypilot']:.2f} (goal <= 0.5)")
    if fig.get("rto_ratio_back_vs_skypilot") is not None:
        lines.append(f"RTO ours back into an entry used before / SkyPilot = {fig['rto_ratio_back_vs_skypilot']:.2f}")
    if fig.get("rto_ratio_standby_vs_skypilot") is not None:
        ratio = fig["rto_ratio_standby_vs_skypilot"]
        lines.append(f"RTO ours with a warm standby / SkyPilot managed jobs = {ratio:.2f}")
    return "\n".join(lines)


# --- the cluster and the measurements -----------------------------------------------------------


@contextlib.contextmanager
def held(lock: str | None) -> Iterator[None]:
    """One measurement under the machine's Ray lock (``--lock``), not the whole benchmark."""
    if not lock:
        yield
        return
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scancel_when(ready: Callable[[], bool], name_has: str, stop: threading.Event, out: dict[str, Any]) -> None:
    """Once ``ready()``, scancel the running allocation whose job name has ``name_has``."""
    while not stop.is_set():
        if ready():
            jobs = [j for j in squeue("RUNNING") if name_has in j[1]]
            if jobs:
                scancel(jobs[0][0])
                out.update(at=time.time(), job=jobs[0])
                return
        stop.wait(0.25)


def scancel_in_turn(cancels: list[tuple[Callable[[], bool], str]], stop: threading.Event, out: dict[str, Any]) -> None:
    """``scancel_when`` for each (ready, name) in turn; ``out`` has the last one's time and
    job, and ``all`` of them."""
    for ready, name_has in cancels:
        got: dict[str, Any] = {}
        scancel_when(ready, name_has, stop, got)
        if "at" not in got:
            return
        out.setdefault("all", []).append(got)
        out.update(got)


def sky_bin() -> str:
    here = Path(sys.executable).parent / "sky"
    return str(here) if here.exists() else "sky"


def base_env(tag: str, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "ORCHESTRATOR_HOME": str(SHARED / tag / "home"),
        "ORCH_ONPREM_SHARED": str(SHARED / tag),
        "SKYPILOT_API_SERVER_LOCAL_PORT": str(port),
        "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
        "SKYPILOT_GLOBAL_CONFIG": str(SKY_CONFIG),
    }


def api_stop(env: dict[str, str]) -> None:
    subprocess.run([sky_bin(), "api", "stop"], env=env, capture_output=True, timeout=120)


def newest_step(folder: Path, pattern: str) -> int:
    steps = []
    for p in folder.glob(pattern):
        try:
            steps.append(int(p.name.split("-")[1].split(".")[0]))
        except (IndexError, ValueError):
            continue
    return max(steps, default=0)


def ours_baseline(args: argparse.Namespace, home: Path, steps: int) -> str:
    """Our uninterrupted run of the same job on the local provider: its weights."""
    from tests.support.runs import orchestrate

    with held(args.lock):
        run = orchestrate(home, f"bench-vs-sky-base-{steps}", *job_overrides(args, steps), timeout=900)
    if run.returncode != 0 or run.result is None:
        raise SystemExit(f"our baseline run failed ({run.returncode}):\n{run.stderr[-3000:]}")
    return str(run.result["weights_sha256"])


def job_overrides(args: argparse.Namespace, steps: int) -> list[str]:
    return ["job=digits", f"job.steps={steps}", f"checkpoint.interval_steps={args.interval}"]


def newest_of_later_generation(folder: Path, first: int) -> int:
    """The newest committed step in ``folder`` written by a generation after ``first``
    (``step-<N>-g<generation>``): trained there, not replicated from the first attempt."""
    steps = [
        int(p.name.split("-")[1])
        for p in folder.glob("step-*")
        if (p / "MANIFEST.json").exists() and int(p.name.rsplit("-g", 1)[-1]) > first
    ]
    return max(steps, default=0)


def ours_trials(args: argparse.Namespace, tag: str, standby: bool = False, back: bool = False) -> list[dict[str, Any]]:
    """Our trials; ``standby``: with recovery=warm_standby, each scancel only once the
    standby in the other entry is ready (the journal's ``standby_ready``); ``back``: a
    second scancel, in the other entry once it trains there, and the failover back into
    the first is the one measured."""
    from tests.support.runs import env_for

    system = "ours_standby" if standby else "ours_back" if back else "ours"
    # With a standby (or a second failover), the run must still be training once the
    # other cluster is up (a launch here takes about a minute, and digits trains 1500
    # steps in seconds).
    steps = args.standby_steps if standby or back else args.steps
    baselines = args.__dict__.setdefault("baselines", {})
    if steps not in baselines:
        baselines[steps] = ours_baseline(args, SHARED / tag / "base-home", steps)
    baseline = baselines[steps]
    print(f"{system}: baseline weights {baseline[:16]}...", flush=True)
    env = base_env(tag, free_port())
    home = SHARED / tag / "home"
    home.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for trial in range(args.trials):
            run_id = f"vs-sky-{'sb-' if standby else 'back-' if back else ''}{trial}"
            checkpoints = SHARED / tag / "stores" / REGIONS[0] / run_id / "checkpoints"
            journal_path = home / "runs" / run_id / "journal.jsonl"
            stop, cancelled = threading.Event(), {}

            def ready(ck: Path = checkpoints, jp: Path = journal_path) -> bool:
                trained = any(
                    (p / "MANIFEST.json").exists() and int(p.name.split("-")[1]) >= args.cancel_at
                    for p in ck.glob("step-*")
                )
                return trained and (not standby or standing_by(jp))

            def trained_there(ck: Path = SHARED / tag / "stores" / REGIONS[1] / run_id / "checkpoints") -> bool:
                return newest_of_later_generation(ck, 1) >= args.cancel_at

            # The training allocation only (the standby's is in the other entry); with
            # ``back``, then the other entry's once it trains there.
            cancels = [(ready, f"{run_id}-{REGIONS[0]}-")]
            if back:
                cancels.append((trained_there, f"{run_id}-{REGIONS[1]}-"))
            killer = threading.Thread(target=scancel_in_turn, args=(cancels, stop, cancelled), daemon=True)
            argv = [
                sys.executable,
                "-m",
                "orchestrator",
                *job_overrides(args, steps),
                f"run_id={run_id}",
                "progress=false",
            ]
            if standby:
                argv.append("recovery=warm_standby")
            if back:
                argv.append("recovery.region_cooldown_s=0")  # back into the first entry at once
            argv += list(CLOUD)  # its stores: under $ORCH_ONPREM_SHARED, this benchmark's folder
            with held(args.lock):
                killer.start()
                t0 = time.time()
                proc = subprocess.run(
                    argv, cwd=REPO, env=env_for(home, env), capture_output=True, text=True, timeout=RUN_TIMEOUT_S
                )
                done = time.time()
                stop.set()
                killer.join(timeout=5)
            (SHARED / tag / f"{system}-{trial}.stderr").write_text(proc.stderr)
            run_dir = home / "runs" / run_id
            result = json.loads((run_dir / "result.json").read_text()) if (run_dir / "result.json").exists() else None
            if proc.returncode != 0 or result is None or "at" not in cancelled:
                raise SystemExit(
                    f"{system}, trial {trial}: exit {proc.returncode}, cancelled {cancelled or 'never'}:\n"
                    + proc.stderr[-3000:]
                )
            journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line]
            incident = result["incidents"][-1]
            if len(result["incidents"]) != (2 if back else 1):
                raise SystemExit(f"{system}, trial {trial}: incidents {result['incidents']}")
            row = ours_trial(journal, incident, cancelled["at"], t0, done)
            row["exact"] = result["weights_sha256"] == baseline
            row["regions"] = [a["region"] for a in result["attempt_history"]]
            row["standby_used"] = any(e.get("type") == "standby_activated" for e in journal)
            names = [e["cluster"] for e in journal if e.get("type") == "provisioned"]
            # Back in the first entry under the run's name for it: the kept runtime found.
            row["name_reused"] = len(names) > 2 and names[-1] == names[0]
            print(f"{system}, trial {trial}: {fmt_row(row)}", flush=True)
            rows.append(row)
    finally:
        api_stop(env)
    return rows


def standing_by(journal: Path) -> bool:
    """Whether the run's journal says its standby is ready (and not lost since)."""
    try:
        lines = journal.read_text().splitlines()
    except FileNotFoundError:
        return False
    state = False
    for line in lines:
        try:
            kind = json.loads(line).get("type")
        except ValueError:
            continue  # a line being written
        if kind == "standby_ready":
            state = True
        elif kind in ("standby_lost", "standby_failed"):
            state = False
    return state


def fmt_row(row: dict[str, Any]) -> str:
    parts = [f"{k} {row[k]:.1f}s" for k in PHASES if row.get(k) is not None]
    tail = f"restored {row.get('restored_step')}, lost {row.get('lost_steps')}, exact {row.get('exact')}"
    return ", ".join([*parts, tail])


def their_task(name: str, workdir: Path, ckpt: Path, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "name": name,
        "workdir": str(workdir),
        "resources": {
            "cpus": 2,
            "memory": 4,
            "any_of": [{"infra": f"slurm/{r}"} for r in REGIONS],
            "job_recovery": {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": 0},
        },
        "run": f"{NODE_PYTHON} train_digits.py --dir {ckpt} --steps {args.steps} --interval {args.interval}",
    }


def their_baseline(args: argparse.Namespace, workdir: Path, tag: str) -> str:
    """Their script's uninterrupted run, on this machine (the node's Python sees this
    venv's torch: the same weights as on the node)."""
    out = SHARED / tag / "sky-base"
    with held(args.lock):
        subprocess.run(
            [
                sys.executable,
                str(workdir / "train_digits.py"),
                "--dir",
                str(out),
                "--steps",
                str(args.steps),
                "--interval",
                str(args.interval),
            ],
            check=True,
            timeout=900,
        )
    return str(json.loads((out / "result.json").read_text())["weights_sha256"])


@contextlib.contextmanager
def their_api_server(tag: str) -> Iterator[dict[str, str]]:
    """Their API server: consolidation mode, the network probe pointed at itself."""
    port = free_port()
    env = base_env(tag, port)
    conf = SHARED / tag / "sky-jobs-config.yaml"
    conf.write_text("allowed_clouds:\n  - slurm\njobs:\n  controller:\n    consolidation_mode: true\n")
    site = SHARED / tag / "probe-site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(PROBE_SITECUSTOMIZE)
    env.update(
        SKYPILOT_GLOBAL_CONFIG=str(conf),
        ORCH_BENCH_PROBE_URL=f"http://127.0.0.1:{port}/docs",
        PYTHONPATH=os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    started = subprocess.run([sky_bin(), "api", "start"], env=env, capture_output=True, text=True, timeout=300)
    if started.returncode != 0:
        raise SystemExit(f"sky api start failed:\n{started.stderr[-2000:]}")
    try:
        yield env
    finally:
        api_stop(env)


def jobs_db() -> sqlite3.Connection:
    return sqlite3.connect(os.path.expanduser("~/.sky/spot_jobs.db"), timeout=30)


def their_job(name: str) -> tuple[int | None, str | None]:
    with contextlib.closing(jobs_db()) as db:
        row = db.execute(
            "SELECT spot_job_id, status FROM spot WHERE job_name = ? OR task_name = ? "
            "ORDER BY spot_job_id DESC LIMIT 1",
            (name, name),
        ).fetchone()
    return (int(row[0]), str(row[1])) if row else (None, None)


def their_events(job_id: int) -> list[tuple[str, float]]:
    with contextlib.closing(jobs_db()) as db:
        rows = db.execute(
            "SELECT new_status, timestamp FROM job_events WHERE spot_job_id = ? ORDER BY id", (job_id,)
        ).fetchall()
    return [(str(s), event_time(t)) for s, t in rows]


def skypilot_trials(args: argparse.Namespace, tag: str) -> list[dict[str, Any]]:
    import yaml

    workdir = SHARED / tag / "sky-workdir"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "train_digits.py").write_text(TRAIN_SCRIPT)
    baseline = their_baseline(args, workdir, tag)
    print(f"skypilot: baseline weights {baseline[:16]}...", flush=True)
    rows: list[dict[str, Any]] = []
    with their_api_server(tag) as env:
        for trial in range(args.trials):
            name = f"vs-sky-{tag[-6:]}-{trial}"
            ckpt = SHARED / tag / f"sky-ckpt-{trial}"
            task = SHARED / tag / f"task-{trial}.yaml"
            task.write_text(yaml.safe_dump(their_task(name, workdir, ckpt, args)))
            stop, cancelled = threading.Event(), {}
            killer = threading.Thread(
                target=scancel_when,
                args=(lambda c=ckpt: newest_step(c, "step-*.pt") >= args.cancel_at, name, stop, cancelled),
                daemon=True,
            )
            with held(args.lock):
                t0 = time.time()
                launch = subprocess.run(
                    [sky_bin(), "jobs", "launch", "-y", "-d", "-n", name, str(task)],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                if launch.returncode != 0:
                    raise SystemExit(f"sky jobs launch failed:\n{launch.stderr[-3000:]}")
                killer.start()
                status, deadline = None, time.monotonic() + RUN_TIMEOUT_S
                while time.monotonic() < deadline:
                    job_id, status = their_job(name)
                    if status in ("SUCCEEDED", "CANCELLED") or (status or "").startswith("FAILED"):
                        break
                    time.sleep(1.0)
                done = time.time()
                stop.set()
                killer.join(timeout=5)
            if status != "SUCCEEDED" or job_id is None or "at" not in cancelled:
                raise SystemExit(f"skypilot, trial {trial}: job {job_id} {status}, cancelled {cancelled or 'never'}")
            progress = (ckpt / "progress.log").read_text().splitlines()
            row = skypilot_trial(their_events(job_id), progress, cancelled["at"], t0, done)
            row["exact"] = json.loads((ckpt / "result.json").read_text())["weights_sha256"] == baseline
            print(f"skypilot, trial {trial}: {fmt_row(row)}", flush=True)
            rows.append(row)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=4, help="trials per system; the figures are medians")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument(
        "--standby-steps",
        type=int,
        default=30000,
        help="steps of the ours_standby arm: enough to still be training once the standby is up",
    )
    ap.add_argument("--interval", type=int, default=50, help="checkpoint every N steps")
    ap.add_argument("--cancel-at", type=int, default=150, help="scancel once a checkpoint at step >= N exists")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"which to run, comma-separated: {', '.join(SYSTEMS)}")
    ap.add_argument("--lock", default=None, metavar="PATH", help="flock PATH for each measurement")
    ap.add_argument("--json", metavar="PATH", help="write the figures and ratios there (flat keys)")
    args = ap.parse_args(argv)
    args.systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    if not args.systems or any(s not in SYSTEMS for s in args.systems):
        ap.error(f"--systems: expected a comma-separated subset of {', '.join(SYSTEMS)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if subprocess.run(["bash", str(SETUP), "--check"], capture_output=True, timeout=60).returncode != 0:
        raise SystemExit("the CI Slurm cluster is not up: run .ci/slurm/setup (as root) first")
    tag = f"bench-vs-sky-{uuid.uuid4().hex[:8]}"
    (SHARED / tag).mkdir(parents=True)
    trials: dict[str, list[dict[str, Any]]] = {}
    try:
        for system in args.systems:
            if system == "skypilot":
                trials[system] = skypilot_trials(args, tag)
            else:
                trials[system] = ours_trials(args, tag, standby=system == "ours_standby", back=system == "ours_back")
    finally:
        keep = tempfile.mkdtemp(prefix="vs-sky-logs-")
        for log in (SHARED / tag).glob("ours*.stderr"):
            shutil.copy(log, keep)
        print(f"(our runs' stderr kept in {keep})", flush=True)
        shutil.rmtree(SHARED / tag, ignore_errors=True)
    fig = figures(trials)
    print()
    print(table(fig, args.systems))
    write_json(
        args.json,
        {
            "steps": args.steps,
            "standby_steps": args.standby_steps,
            "interval": args.interval,
            "cancel_at": args.cancel_at,
            **fig,
        },
    )


if __name__ == "__main__":
    main()
