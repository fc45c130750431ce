"""Failover time, phase by phase, against the floor on this machine.

Runs the digits job twice with ``kill_region`` (all processes of the region,
SIGKILL): once with a cold failover (provision a cluster, start the runtime) and
once with a warm standby (``recovery=warm_standby``). The floor is what any
failover to a new cluster must pay at least: a bare ``ray start`` of a cluster
plus loading the same checkpoint.

    python benchmarks/recovery.py [--steps 10000] [--kill-at 6000]
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import orchestrate, temp_home


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


def floor(store_url: str, run_id: str) -> dict[str, float]:
    import torch

    from providers.base import RegionSpec
    from providers.local import LocalProvider
    from recovery.store import CheckpointStore

    provider = LocalProvider()
    t0 = time.time()
    cluster = provider.launch(RegionSpec("floor", "file:///tmp", 2), f"bench-floor-{time.time_ns()}", 60)
    start = time.time() - t0
    provider.teardown(cluster)
    store = CheckpointStore(store_url, region="floor")
    t0 = time.time()
    # The floor of a restore's reads: the newest commit, trusted or not (no run key here).
    m = store.manifest(run_id, max(store.committed_steps(run_id)))
    assert m is not None
    for f in m.files:
        torch.load(io.BytesIO(store.read(m, f.name)), weights_only=True)
    load = time.time() - t0
    return {"ray start": start, "checkpoint load": load, "total": start + load}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--kill-at", type=int, default=6000)
    args = ap.parse_args()
    rows: dict[str, dict[str, float]] = {}
    home = temp_home()
    fault = f"chaos.faults=[{{kind:kill_region,at_step:{args.kill_at}}}]"
    heartbeat = 1.0
    for mode, extra in (("cold", []), ("warm standby", ["recovery=warm_standby"])):
        result, journal = orchestrate(home, f"recovery-{mode.split()[0]}", f"job.steps={args.steps}", fault, *extra)
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
    )
    for mode in rows:
        total = rows[mode]["total (RTO)"]
        det = rows[mode]["detection"]
        print(
            f"{mode}: total / floor = {total / fl['total']:.2f} (goal <= 1.5); "
            f"detection {det:.2f}s = {det / heartbeat:.2f} heartbeat intervals (goal <= 2)"
        )


if __name__ == "__main__":
    main()
