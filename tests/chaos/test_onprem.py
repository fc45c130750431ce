"""A lost on-prem cluster: the Slurm allocation is scancelled mid-run (as an admin or a
preempting partition would), SkyPilot's forced refresh finds the cluster gone, and the run
fails over to the second Slurm "cluster" entry (the same node, orch-slurm-b), ending
with exactly the weights of the uninterrupted on-prem run. The workload is a user's
project (examples/seqproj) that reaches the nodes through job.code_dir alone."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.onprem, pytest.mark.timeout(1500)]

SCANCEL_AFTER_STEP = 200
INTERVAL = 100  # examples/seqproj/conf/job/seq.yaml checkpoint.interval_steps


def _newest_step(checkpoints: Path) -> int:
    steps = [int(p.name.split("-")[1]) for p in checkpoints.glob("step-*") if (p / "MANIFEST.json").exists()]
    return max(steps, default=0)


def test_scancel_mid_run_fails_over_with_exact_weights(onprem, onprem_baseline, example_project) -> None:
    from onprem import RUN_TIMEOUT_S
    from support import run_example

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
    run = run_example(
        example_project, onprem.home, run_id, "cloud=onprem", code_dir=True, env=onprem.env, timeout=RUN_TIMEOUT_S
    )
    killer.join(timeout=5)

    assert "job" in cancelled, f"never reached step {SCANCEL_AFTER_STEP} to cancel: {run.stderr[-3000:]}"
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.result is not None and run.result["status"] == "SUCCEEDED"
    assert run.result["region"] == "orch-slurm-b"
    (incident,) = run.result["incidents"]
    assert incident["kind"] == "cluster_lost", incident
    assert (incident["from_region"], incident["to_region"]) == ("orch-slurm-a", "orch-slurm-b")
    assert incident["restored_step"] >= SCANCEL_AFTER_STEP - INTERVAL
    # The provider saw the cluster gone (the allocation no longer running, or SkyPilot's
    # record gone after a forced refresh), not a driver that died on a healthy cluster.
    assert f"skypilot: {run_id}-orch-slurm-a-g1: gone" in run.stderr
    assert run.result["weights_sha256"] == onprem_baseline.result["weights_sha256"]
    assert onprem.wait_squeue_empty() == [], "an allocation outlived the run"
    assert not list((onprem.home / "clusters").glob("*.json")), "a cluster record was left behind"
