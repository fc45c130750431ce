"""The default job end to end on the local provider: real Ray clusters, real training, real files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from recovery.store import parse_step_dir
from tests.support.paths import REPO
from tests.support.runs import env_for, orchestrate, ray_pids, wait_no_new_ray

RESULT_FIELDS = (
    "run_id",
    "status",
    "final_step",
    "metrics",
    "final_checkpoint",
    "weights_sha256",
    "attempts",
    "incidents",
)


def test_digits_succeeds_with_accuracy_and_leaves_no_ray_process(baseline):
    r = baseline.result
    assert r is not None
    for field in RESULT_FIELDS:
        assert field in r, field
    assert r["status"] == "SUCCEEDED"
    assert r["final_step"] == 500
    assert r["metrics"]["accuracy"] >= 0.95
    assert r["attempts"] == 1
    assert r["incidents"] == []
    assert len(r["weights_sha256"]) == 64
    # (the fixture already checked that no Ray process outlived the run)


def test_final_checkpoint_is_committed_with_manifest_last(baseline):
    from recovery.store import CheckpointStore

    url = baseline.result["final_checkpoint"]
    store_url, folder = url.rsplit("/baseline/checkpoints/", 1)
    # The first attempt's commit: its folder names the step and the generation that wrote it.
    assert folder == "step-500-g1", folder
    from recovery.signing import run_keys_of

    store = CheckpointStore(store_url, region="local-a", key=run_keys_of(str(baseline.run_dir)))
    assert store.verify("baseline", 500).ok
    manifest = store.manifest("baseline", 500)
    names = {f.name for f in manifest.files}
    assert {"model.pt", "optimizer.pt", "state.pt", "rng-rank0.pt", "rng-rank1.pt"} <= names
    assert manifest.attempt == 1 and manifest.step == 500


def test_journal_tells_the_lifecycle_and_replication(baseline):
    transitions = [(e["from"], e["to"]) for e in baseline.events("transition")]
    assert transitions == [("PENDING", "PROVISIONING"), ("PROVISIONING", "RUNNING"), ("RUNNING", "SUCCEEDED")]
    replicated = baseline.events("replicated")
    assert {e["to"] for e in replicated} == {"local-b", "local-c"}
    assert all(e["lag_s"] >= 0 for e in replicated)
    # Every region's store keeps at most keep_last checkpoints and holds the final one.
    home = baseline.run_dir.parent.parent
    for region in ("local-a", "local-b", "local-c"):
        steps = sorted(p.name for p in (home / "stores" / region / "baseline" / "checkpoints").iterdir())
        assert len(steps) <= 3, (region, steps)
        assert any(parse_step_dir(s) == 500 for s in steps), (region, steps)


def test_tensorboard_holds_the_loss_curve_to_the_last_step_and_the_final_metrics(baseline):
    from tests.support.tbread import shown

    tb = shown(baseline.run_dir / "tensorboard")
    assert tb.restarts == [1]
    assert tb.steps("train/loss") == list(range(5, 501, 5))
    (accuracy,) = tb.scalars["final/accuracy"]
    assert accuracy == (500, pytest.approx(baseline.result["metrics"]["accuracy"]))
    assert tb.steps("train/steps_per_s")[-1] == 500 and "telemetry/cpu_percent" in tb.scalars
    assert tb.steps("replication/lag_s") and "incidents" not in tb.texts
    assert tb.texts["run"] == [(500, "**SUCCEEDED** at step 500")]


def test_status_action_prints_a_readable_summary(baseline, orch_home):
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "action=status", "run_id=baseline"],
        cwd=REPO,
        env=env_for(orch_home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "baseline" in out and "SUCCEEDED" in out and "500/500" in out
    assert baseline.result["weights_sha256"] in out
    assert "incidents  none" in out


def test_status_of_an_unknown_run_is_one_line_exit_2(orch_home):
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "action=status", "run_id=nope"],
        cwd=REPO,
        env=env_for(orch_home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "run_id" in proc.stderr


def test_finished_run_id_is_not_reused(baseline, orch_home):
    before = ray_pids()
    run = orchestrate(orch_home, "baseline", timeout=60)
    assert run.returncode == 2
    assert "already finished" in run.stderr
    assert not wait_no_new_ray(before)
    # The finished run's result is untouched.
    assert json.loads((baseline.run_dir / "result.json").read_text()) == baseline.result
