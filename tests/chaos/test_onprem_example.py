"""A user's project on the Slurm cluster through ``job.code_dir`` alone.

examples/seqproj is copied to a folder that only root may read (the node user cannot
see it), and the run starts from another folder with nothing of the project on the
path: the controller imports the workload from ``job.code_dir``, SkyPilot syncs the
folder to the node (a file mount), and Ray's workers and the runtime there import it
from the synced copy. The run must succeed with the workload's metrics and checkpoints,
leaving nothing in squeue.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.onprem, pytest.mark.timeout(1200)]


def test_the_example_project_trains_on_slurm_from_code_dir(onprem, tmp_path: Path) -> None:
    from onprem import RUN_TIMEOUT_S
    from support import REPO, env_for

    code = tmp_path / "private" / "seqproj"
    shutil.copytree(REPO / "examples" / "seqproj", code, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "private").chmod(0o700)  # not the node user's: only the sync can bring it there
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_id = "onprem-seq"
    argv = [
        sys.executable,
        "-m",
        "orchestrator",
        "--config-dir",
        str(code / "conf"),
        "job=seq",
        "cloud=onprem",
        f"job.code_dir={code}",
        f"run_id={run_id}",
        "progress=false",
    ]
    proc = subprocess.run(
        argv, cwd=elsewhere, env=env_for(onprem.home, onprem.env), capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    run_dir = onprem.home / "runs" / run_id
    result_path = run_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else None

    assert proc.returncode == 0, proc.stderr[-4000:]
    assert result is not None and result["status"] == "SUCCEEDED", result
    assert result["region"] == "orch-slurm-a" and result["final_step"] == 600 and not result["incidents"]
    assert result["metrics"]["accuracy"] >= 0.85, result["metrics"]
    assert "train_loss_ema" in result["metrics"], "evaluate() of the synced SeqClassifier"
    (provisioned,) = [e for e in map(json.loads, (run_dir / "journal.jsonl").open()) if e["type"] == "provisioned"]
    assert provisioned["info"]["code_dir"] == "~/sky_code"
    store = onprem.home.parent / "stores" / "orch-slurm-a" / run_id / "checkpoints" / "step-600"
    names = {f["name"] for f in json.loads((store / "MANIFEST.json").read_text())["files"]}
    assert {"model.pt", "optimizer.pt", "scheduler.pt", "workload.pt"} <= names, names
    assert onprem.wait_squeue_empty() == [], "the allocation outlived the run"
    assert not list((onprem.home / "clusters").glob("*.json")), "a cluster record was left behind"
