"""A lost on-prem cluster: the Slurm allocation is scancelled mid-run (as an admin or a
preempting partition would), SkyPilot's forced refresh finds the cluster gone, and the run
fails over to the second Slurm "cluster" entry (the same node, orch-slurm-b), ending
with exactly the weights of the uninterrupted on-prem run."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.onprem, pytest.mark.timeout(1500)]

SCANCEL_AFTER_STEP = 150


def _newest_step(checkpoints: Path) -> int:
    steps = [int(p.name.split("-")[1]) for p in checkpoints.glob("step-*") if (p / "MANIFEST.json").exists()]
    return max(steps, default=0)


def test_scancel_mid_run_fails_over_with_exact_weights(onprem, onprem_baseline) -> None:
    from onprem import RUN_TIMEOUT_S
    from support import REPO, Run, env_for

    run_id = "onprem-scancel"
    checkpoints = onprem.home.parent / "stores" / "orch-slurm-a" / run_id / "checkpoints"
    cancelled: dict[str, object] = {}

    def cancel_when_trained() -> None:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline and "job" not in cancelled:
            if _newest_step(checkpoints) >= SCANCEL_AFTER_STEP:
                jobs = [j for j in onprem.squeue() if "orch-slurm-a" in j[1]]
                if jobs:
                    onprem.scancel(jobs[0][0])
                    cancelled.update(job=jobs[0], at_step=_newest_step(checkpoints), at=time.time())
                    return
            time.sleep(0.5)

    killer = threading.Thread(target=cancel_when_trained, daemon=True)
    killer.start()
    argv = [sys.executable, "-m", "orchestrator", "job=digits", "cloud=onprem", f"run_id={run_id}", "progress=false"]
    proc = subprocess.run(
        argv, cwd=REPO, env=env_for(onprem.home, onprem.env), capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    killer.join(timeout=5)
    import json

    run_dir = onprem.home / "runs" / run_id
    result_path = run_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    run = Run(proc.returncode, proc.stdout, proc.stderr, run_dir, result)

    assert "job" in cancelled, f"never reached step {SCANCEL_AFTER_STEP} to cancel: {proc.stderr[-3000:]}"
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.result is not None and run.result["status"] == "SUCCEEDED"
    assert run.result["region"] == "orch-slurm-b"
    (incident,) = run.result["incidents"]
    assert incident["kind"] == "cluster_lost", incident
    assert (incident["from_region"], incident["to_region"]) == ("orch-slurm-a", "orch-slurm-b")
    assert incident["restored_step"] >= SCANCEL_AFTER_STEP - 50
    # The provider saw the cluster gone (the allocation no longer running, or SkyPilot's
    # record gone after a forced refresh), not a driver that died on a healthy cluster.
    assert f"skypilot: {run_id}-orch-slurm-a-g1: gone" in run.stderr
    assert run.result["weights_sha256"] == onprem_baseline.result["weights_sha256"]
    assert onprem.wait_squeue_empty() == [], "an allocation outlived the run"
    assert not list((onprem.home / "clusters").glob("*.json")), "a cluster record was left behind"
