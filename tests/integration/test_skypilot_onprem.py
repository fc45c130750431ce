"""``cloud=onprem`` for real: SkyPilot provisions a Slurm allocation on this machine's
one-node cluster, Ray starts in it, a user's project (examples/seqproj) trains,
checkpoints and finishes, and the cluster is torn down with nothing left in squeue.

The project lives in a folder the node user cannot read, and the run starts from
another folder with nothing of it on the path: only ``job.code_dir`` brings the code
to the node (a SkyPilot file mount), where Ray's workers and the runtime import it."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.onprem, pytest.mark.timeout(1200)]


def test_a_users_project_on_slurm_end_to_end(onprem, onprem_baseline, example_baseline) -> None:
    run = onprem_baseline
    assert run.result is not None and run.result["status"] == "SUCCEEDED", run.stderr[-3000:]
    assert run.result["region"] == "orch-slurm-a" and run.result["final_step"] == 600
    assert not run.result["incidents"]
    assert "train_loss_ema" in run.result["metrics"], "evaluate() of the synced SeqClassifier"
    (provisioned,) = run.events("provisioned")
    assert provisioned["info"]["infra"] == "slurm/orch-slurm-a"
    assert provisioned["info"]["code_dir"] == "~/sky_code"
    assert provisioned["provision_s"] > 0
    # SkyPilot's provisioning is shown to the person waiting, not a silent wait.
    assert "skypilot: launching" in run.stderr and "skypilot: tearing down" in run.stderr
    # The runtime ran on the node (as the node user) and committed checkpoints to the store.
    store = onprem.home.parent / "stores" / "orch-slurm-a" / run.run_dir.name / "checkpoints"
    manifest = store / "step-600" / "MANIFEST.json"
    assert manifest.exists(), sorted(p.name for p in store.iterdir())
    names = {f["name"] for f in json.loads(manifest.read_text())["files"]}
    assert {"model.pt", "optimizer.pt", "scheduler.pt", "workload.pt"} <= names, names
    # The same weights as the local provider's run of the same project.
    assert run.result["weights_sha256"] == example_baseline.result["weights_sha256"]
    assert onprem.wait_squeue_empty() == [], "the allocation outlived the run"
    assert not list((onprem.home / "clusters").glob("*.json")), "a cluster record was left behind"


def test_status_of_an_onprem_run(onprem, onprem_baseline) -> None:
    import subprocess
    import sys

    from support import REPO

    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "action=status", "run_id=onprem-baseline"],
        cwd=REPO,
        env=onprem.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "SUCCEEDED" in out.stdout and "orch-slurm-a" in out.stdout
    assert json.loads((onprem_baseline.run_dir / "result.json").read_text())["status"] == "SUCCEEDED"
