"""Failover time, phase by phase, against the floor on this machine.

Runs the digits job twice with ``kill_region`` (all processes of the region,
SIGKILL): once with a cold failover (provision a cluster, start the runtime) and
once with a warm standby (``recovery=warm_standby``). The floor is what any
failover to a new cluster must pay at least: a bare ``ray start`` of a cluster
(the quickest of three) plus loading the same checkpoint.

    python benchmarks/recovery.py [--steps 10000] [--kill-at 6000] [--job digits] [--json PATH]

``--job gpt_large`` measures it on the large-state job (about 230 MB of model and
optimizer state per checkpoint; a step takes seconds there, so pass small
``--steps``/``--kill-at`` and, if the job's own cadence is too sparse,
``--interval-steps``). ``--json PATH`` writes the figures (see ``figures``).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import orchestrate, temp_home, write_json

HEARTBEAT_S = 1.0


def phases(journal: list[dict[str, Any]], incident: dict[str, Any]) -> dict[str, float]:
    def first(type_: str, after: float, **match: Any) -> dict[str, Any]:
        for e in journal:
            t = e.get("time", e["ts"])
            if e["type"] == type_ and t >= after and all(e.get(k) == v for k, v in match.items()):
                return e
        raise SystemExit(f"no {type_} event after the failure in the journal")

    failed = incident["failed_at"]
    detected = incident["detected_at"]
    attempt = first("attempt_started", detected)
    gen = attempt["generation"]
    if attempt.get("standby"):
        ready_at = first("standby_activated", detected)["ts"]
    else:
        ready_at = first("provisioned", detected, purpose="attempt")["ts"]
    workers = first("runtime.workers_ready", 0.0, generation=gen)["time"]
    started = first("runtime.train_started", detected, generation=gen)["time"]
    workers = max(workers, ready_at)  # a standby's workers were ready before the failure
    return {
        "detection": detected - failed,
        "provisioning": ready_at - detected,
        "runtime start-up": workers - ready_at,
        "restore": started - workers,
        "first step": incident["first_step_at"] - started,
        "total (RTO)": incident["rto_s"],
    }


# A cluster's start varies by a second from one to the next (Ray's own waits); the floor
# is the least a failover must pay, so the quickest of a few.
FLOOR_STARTS = 3


def floor(store_url: str, run_id: str) -> dict[str, float]:
    import torch

    from providers.base import RegionSpec
    from providers.local.provider import LocalProvider
    from recovery.store import CheckpointStore

    provider = LocalProvider()
    starts = []
    for _ in range(FLOOR_STARTS):
        t0 = time.time()
        cluster = provider.launch(RegionSpec("floor", "file:///tmp", 2), f"bench-floor-{time.time_ns()}", 60)
        starts.append(time.time() - t0)
        provider.teardown(cluster)
    start = min(starts)
    store = CheckpointStore(store_url, region="floor")
    t0 = time.time()
    # The floor of a restore's reads: the newest commit, trusted or not (no run key here).
    m = store.manifest(run_id, max(store.committed_steps(run_id)))
    assert m is not None
    for f in m.files:
        torch.load(io.BytesIO(store.read(m, f.name)), weights_only=True)
    load = time.time() - t0
    size = sum(f.size for f in m.files)
    return {"ray start": start, "checkpoint load": load, "total": start + load, "checkpoint bytes": size}


# The JSON key of each phase of ``phases``.
PHASE_KEYS = {
    "detection": "detection",
    "provisioning": "provisioning",
    "runtime start-up": "runtime_startup",
    "restore": "restore",
    "first step": "first_step",
    "total (RTO)": "rto",
}


def figures(
    rows: dict[str, dict[str, float]], fl: dict[str, float], heartbeat_s: float = HEARTBEAT_S
) -> dict[str, Any]:
    """The flat figures of one run: ``rto_cold_s``, ``rto_standby_s``, ``rto_floor_s``,
    ``rto_ratio`` (cold / floor), ``rto_standby_ratio``, the floor's two parts, each
    phase as ``cold_<phase>_s`` / ``standby_<phase>_s`` and detection in heartbeat
    intervals. Pure: the tests drive it with records."""
    cold, warm = rows["cold"], rows["warm standby"]
    out: dict[str, Any] = {
        "rto_cold_s": round(cold["total (RTO)"], 3),
        "rto_standby_s": round(warm["total (RTO)"], 3),
        "rto_floor_s": round(fl["total"], 3),
        "rto_ratio": round(cold["total (RTO)"] / fl["total"], 3),
        "rto_standby_ratio": round(warm["total (RTO)"] / fl["total"], 3),
        "floor_ray_start_s": round(fl["ray start"], 3),
        "floor_checkpoint_load_s": round(fl["checkpoint load"], 3),
        "checkpoint_mb": round(fl["checkpoint bytes"] / 1e6, 2),
    }
    for prefix, row in (("cold", cold), ("standby", warm)):
        for phase, key in PHASE_KEYS.items():
            if key != "rto":
                out[f"{prefix}_{key}_s"] = round(row[phase], 3)
        out[f"{prefix}_detection_heartbeats"] = round(row["detection"] / heartbeat_s, 2)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--kill-at", type=int, default=6000)
    ap.add_argument("--job", default="digits", help="the job config (conf/job/NAME.yaml), e.g. gpt_large")
    ap.add_argument(
        "--interval-steps", type=int, default=None, help="checkpoint.interval_steps (default: the job's own)"
    )
    ap.add_argument("--json", metavar="PATH", help="write the figures and ratios there (flat keys)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rows: dict[str, dict[str, float]] = {}
    home = temp_home()
    fault = f"chaos.faults=[{{kind:kill_region,at_step:{args.kill_at}}}]"
    heartbeat = HEARTBEAT_S
    job = [f"job={args.job}", f"job.steps={args.steps}"]
    if args.interval_steps is not None:
        job.append(f"checkpoint.interval_steps={args.interval_steps}")
    for mode, extra in (("cold", []), ("warm standby", ["recovery=warm_standby"])):
        result, journal = orchestrate(home, f"recovery-{mode.split()[0]}", *job, fault, *extra)
        assert result["status"] == "SUCCEEDED" and len(result["incidents"]) == 1, result
        rows[mode] = phases(journal, result["incidents"][0])
        print(
            f"{mode}: weights {result['weights_sha256'][:16]}..., rto {rows[mode]['total (RTO)']:.2f}s",
            flush=True,
        )
    fl = floor(f"file://{home}/stores/local-b", "recovery-cold")
    print()
    print(f"{'phase':<18}{'cold':>10}{'warm':>10}")
    for phase in rows["cold"]:
        print(f"{phase:<18}{rows['cold'][phase]:>9.2f}s{rows['warm standby'][phase]:>9.2f}s")
    print()
    print(
        f"floor: ray start {fl['ray start']:.2f}s + checkpoint load {fl['checkpoint load']:.3f}s = {fl['total']:.2f}s"
        f" (checkpoint {fl['checkpoint bytes'] / 1e6:.1f} MB)"
    )
    for mode in rows:
        total = rows[mode]["total (RTO)"]
        det = rows[mode]["detection"]
        print(
            f"{mode}: total / floor = {total / fl['total']:.2f} (goal <= 1.5); "
            f"detection {det:.2f}s = {det / heartbeat:.2f} heartbeat intervals (goal <= 2)"
        )
    write_json(
        args.json,
        {"job": args.job, "steps": args.steps, "kill_at": args.kill_at, **figures(rows, fl, heartbeat)},
    )


if __name__ == "__main__":
    main()
