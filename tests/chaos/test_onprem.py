"""``cloud=onprem`` for real, and a lost on-prem cluster: SkyPilot provisions a Slurm
allocation on this machine's one-node cluster, Ray starts in it, a user's project
(examples/seqproj) trains and checkpoints; the allocation is scancelled mid-run (as an
admin or a preempting partition would), SkyPilot's forced refresh finds the cluster
gone, and the run fails over to the second Slurm "cluster" entry (the same node,
orch-slurm-b), finishing with exactly the weights of the same project's uninterrupted
run on the local provider; every allocation is torn down, nothing left in squeue.

The project lives in a folder the node user cannot read, and the run starts from
another folder with nothing of it on the path: only ``job.code_dir`` brings the code
to the nodes (a SkyPilot file mount), where Ray's workers and the runtime import it.
Then orch-slurm-b is lost half way through its first upload (chaos kill_region, which
on Slurm SIGKILLs every process of the allocation and cancels it, before the upload may
go on): nothing of that step is committed, and the run fails back into orch-slurm-a,
restoring the newest checkpoint committed before the cut (nothing newer is lost), under
the same cluster name: the lost cluster's node runtime (SkyPilot's
per-cluster home) was kept for it, not installed again, and removed when the run ended.
Back there, the allocation is frozen for a few seconds (chaos partition_region: SIGSTOP,
then SIGCONT, to all of it), inside the heartbeat lease: the missed heartbeats start a
hedged launch of orch-slurm-b (recovery.hedge_max_launches), cancelled when they come
again, its cluster torn down with nothing left in squeue, and no failover. Then the
workload raises once (chaos user_error): the policy restarts it in place, and the attempt
that does runs on the same cluster, kept for it, with no launch. One run proves all of it
(each SkyPilot launch costs about a minute here); the regions ask one CPU each, so the
hedge's allocation and the running one stay within the node's two cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.onprem, pytest.mark.timeout(1500)]

SCANCEL_AFTER_STEP = 200
# Then, back in orch-slurm-a, the workload raises once (orch-slurm-b is killed well before).
USER_ERROR_AT_STEP = 560
# Back in orch-slurm-a, before the user error: frozen for FREEZE_S, inside the 10 s lease.
FREEZE_AT_STEP = 400
FREEZE_S = 6
# The hedge's sign: heartbeats missing this long, well inside the freeze and well past the
# scancel's detection (1.4 s on an idle machine; on a loaded one it can pass the default
# 2.5 s, and a hedge sent out at the scancel takes orch-slurm-b's name from the failover).
HEDGE_AFTER_S = 3.5
FLAP_AT_STEP = 50
INTERVAL = 100  # examples/seqproj/conf/job/seq.yaml checkpoint.interval_steps


def _newest_step(checkpoints: Path) -> int:
    """The newest committed step there (``step-<N>-g<generation>``)."""
    steps = [int(p.name.split("-")[1]) for p in checkpoints.glob("step-*") if (p / "MANIFEST.json").exists()]
    return max(steps, default=0)


def test_a_users_project_on_slurm_survives_a_scancel_with_exact_weights(
    onprem, example_baseline, example_project
) -> None:
    from tests.support.onprem import CLOUD, NODE_USER, RUN_TIMEOUT_S
    from tests.support.paths import REPO
    from tests.support.runs import run_example

    run_id = "onprem-scancel"
    checkpoints = onprem.home.parent / "stores" / "orch-slurm-a" / run_id / "checkpoints"
    cancelled: dict[str, object] = {}

    checkpoints_b = onprem.home.parent / "stores" / "orch-slurm-b" / run_id / "checkpoints"
    # SkyPilot's per-cluster homes on the shared folder (the node user's home here).
    sky_homes = Path(os.path.expanduser(f"~{NODE_USER}")) / ".sky_clusters"

    def cancel(region: str, folder: Path, step: int, key: str) -> bool:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            if _newest_step(folder) >= step:
                jobs = [j for j in onprem.squeue() if region in j[1]]
                if jobs:
                    onprem.scancel(jobs[0][0])
                    cancelled[key] = {"job": jobs[0], "at_step": _newest_step(folder), "at": time.time()}
                    return True
            time.sleep(0.5)
        return False

    def cancel_when_trained() -> None:
        if not cancel("orch-slurm-a", checkpoints, SCANCEL_AFTER_STEP, "a"):
            return
        # What orch-slurm-a's lost cluster left of its runtime, while orch-slurm-b uploads
        # its first checkpoint (its files in a folder of generation 2 or later).
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            if any(int(p.name.rsplit("-g", 1)[-1]) >= 2 for p in checkpoints_b.glob("step-*-g*")):
                cancelled["b_kept"] = sorted(p.name for p in sky_homes.glob(f"{run_id}-orch-slurm-a*"))
                return
            time.sleep(0.2)

    killer = threading.Thread(target=cancel_when_trained, daemon=True)
    killer.start()
    run = run_example(
        example_project,
        onprem.home,
        run_id,
        *CLOUD,
        # Before the scancel: three of SkyPilot's health checks in a row fail while the
        # runtime's heartbeats are fresh, which is no loss.
        f"chaos.faults=[{{kind:status_flap,at_step:{FLAP_AT_STEP},count:3}},"
        "{kind:kill_region,during:checkpoint_upload,region:orch-slurm-b},"
        f"{{kind:partition_region,at_step:{FREEZE_AT_STEP},duration_s:{FREEZE_S},region:orch-slurm-a}},"
        f"{{kind:user_error,at_step:{USER_ERROR_AT_STEP}}}]",
        # Back into orch-slurm-a at once, after orch-slurm-b is lost too.
        "recovery.region_cooldown_s=0",
        "recovery.hedge_max_launches=1",
        f"recovery.hedge_after_s={HEDGE_AFTER_S}",
        "cloud.regions.orch-slurm-a.cpus='1'",
        "cloud.regions.orch-slurm-b.cpus='1'",
        code_dir=True,
        env=onprem.env,
        timeout=RUN_TIMEOUT_S,
    )
    killer.join(timeout=5)

    assert "a" in cancelled, f"never reached step {SCANCEL_AFTER_STEP} to cancel: {run.stderr[-3000:]}"
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.result is not None and run.result["status"] == "SUCCEEDED"
    assert run.result["region"] == "orch-slurm-a"
    incident, back, raised = run.result["incidents"]
    assert incident["kind"] == back["kind"] == "cluster_lost", (incident, back)
    assert raised["kind"] == "user_error" and raised["from_region"] == raised["to_region"] == "orch-slurm-a"
    assert (incident["from_region"], incident["to_region"]) == ("orch-slurm-a", "orch-slurm-b")
    assert (back["from_region"], back["to_region"]) == ("orch-slurm-b", "orch-slurm-a")
    # Nothing newer is lost: each restore took the newest checkpoint committed before its
    # loss. orch-slurm-b was cut half way through its first upload (files sent, no
    # manifest), which SIGKILLed its allocation before the upload could go on: the run went
    # back to the checkpoint orch-slurm-b had restored.
    assert incident["restored_step"] >= cancelled["a"]["at_step"] >= SCANCEL_AFTER_STEP  # type: ignore[index]
    (cut,) = [e for e in run.events("fault_injected") if e["kind"] == "kill_region"]
    assert (cut["region"], cut["during"], cut["cancelled"]) == ("orch-slurm-b", "checkpoint_upload", True), cut
    assert cut["step"] == incident["restored_step"] + INTERVAL, (cut, incident)
    assert back["restored_step"] == incident["restored_step"], (incident, back)
    assert not (checkpoints_b / f"step-{cut['step']}-g2" / "MANIFEST.json").exists(), "the cut upload committed"
    # The provider saw the cluster gone (the allocation no longer running, or SkyPilot's
    # record gone after a forced refresh), not a driver that died on a healthy cluster.
    assert f"skypilot: {run_id}-orch-slurm-a: gone" in run.stderr
    # The flap before it: glitches journaled, one attempt until the scancel (the first incident).
    flapped = [g for g in run.events("health_glitch") if "status_flap" in (g.get("detail") or "")]
    assert [(g["region"], g["failed_checks"]) for g in flapped] == [("orch-slurm-a", n) for n in (1, 2, 3)]
    assert [f["kind"] for f in run.events("failure_detected")][:2] == ["cluster_lost", "cluster_lost"]
    regions = ["orch-slurm-a", "orch-slurm-b", "orch-slurm-a", "orch-slurm-a"]
    assert [a["region"] for a in run.result["attempt_history"]] == regions
    # One cluster name per region: back in orch-slurm-a, the run's name for it again,
    # and the lost cluster's runtime was there for that launch (kept, not swept), then
    # swept with the other once the run ended.
    provisioned = [p for p in run.events("provisioned") if p.get("purpose") != "standby"]
    names = [f"{run_id}-{r}" for r in regions]
    assert [p["cluster"] for p in provisioned] == names
    assert [p["info"]["infra"] for p in provisioned] == [f"slurm/{r}" for r in regions]
    teardowns = [(t["cluster"], t.get("runtime_kept")) for t in run.events("teardown") if t.get("purpose") != "standby"]
    assert teardowns == [(names[0], True), (names[1], True), (names[0], True)], teardowns
    # The freeze back in orch-slurm-a: a hedge in orch-slurm-b at the missed heartbeats,
    # cancelled when they came again (no failover: the incidents above are all there are),
    # its cluster (under the run's name for orch-slurm-b, free again by then) torn down.
    (frozen,) = [e for e in run.events("fault_injected") if e["kind"] == "partition_region"]
    assert frozen["frozen"] is True and frozen["region"] == "orch-slurm-a", frozen
    assert any(e["kind"] == "partition_region" and e.get("resumed") == 1 for e in run.events("fault_ended"))
    (hedge,) = run.events("hedge_started")
    assert (hedge["region"], hedge["from_region"]) == ("orch-slurm-b", "orch-slurm-a"), hedge
    assert hedge["reason"].startswith("no heartbeat for "), hedge
    (dropped,) = run.events("hedge_cancelled")
    assert dropped["region"] == "orch-slurm-b" and "answered again" in dropped["reason"], dropped
    assert dropped["ts"] - hedge["ts"] < FREEZE_S + 5, (hedge, dropped)
    hedged = [p["cluster"] for p in run.events("provisioned") if p.get("purpose") == "standby"]
    assert hedged == [names[1]], hedged
    assert [t["cluster"] for t in run.events("teardown") if t.get("purpose") == "standby"] == hedged
    assert not run.events("standby_activated")
    kept_name = provisioned[0]["info"]["name_on_cloud"]
    assert cancelled["b_kept"] == [kept_name], cancelled
    assert sorted(e["cluster"] for e in run.events("runtime_swept")) == sorted(set(names))
    # The user error: the attempt after it took the cluster its attempt kept, no launch.
    (kept,) = run.events("cluster_kept")
    assert (kept["cluster"], kept["failure"]) == (names[0], "user_error")
    assert provisioned[3]["kept_from"] == kept["generation"] == provisioned[2]["generation"]
    assert run.stderr.count("skypilot: launching") == 4  # the hedge's too
    assert not any(e.get("error") for e in run.events("runtime_swept"))
    assert not list(sky_homes.glob(f"{run_id}-*")), "a kept runtime outlived the run"
    # What benchmarks/vs_skypilot_jobs.py (pytest -m bench) reads of our side's trial is here.
    from benchmarks.vs_skypilot_jobs import AFTER, ours_trial

    at = float(cancelled["a"]["at"])  # type: ignore[index]
    ours = ours_trial(run.journal(), incident, at, at, at)
    assert 0 <= ours["detect"] < ours["cluster_up"] < ours["rto"], ours  # type: ignore[operator]
    # Where the time after the detection went, each phase from the journal (the runtime's
    # own events for its start and restore).
    phases = [ours[f"after_{p}"] for p in AFTER]
    assert all(p is not None and p >= 0 for p in phases), ours
    assert sum(phases) == pytest.approx(ours["rto"] - ours["detect"], abs=0.5), ours  # type: ignore[operator]
    assert ours["restored_step"] == incident["restored_step"] and ours["lost_steps"] is not None, ours
    # The same weights as the local provider's uninterrupted run of the same project.
    assert run.result["weights_sha256"] == example_baseline.result["weights_sha256"]
    assert run.result["final_step"] == 600
    assert "train_loss_ema" in run.result["metrics"], "evaluate() of the synced SeqClassifier"
    assert all(p["info"]["code_dir"] == "~/sky_code" and p["provision_s"] > 0 for p in provisioned[:3])
    # SkyPilot's provisioning is shown to the person waiting, not a silent wait.
    assert "skypilot: launching" in run.stderr and "skypilot: tearing down" in run.stderr
    # The runtime ran on the nodes (as the node user) and committed every named part.
    ckpts = checkpoints
    final = next(ckpts.glob("step-600-g*/MANIFEST.json"), ckpts / "step-600-g?" / "MANIFEST.json")
    assert final.exists()
    names = {f["name"] for f in json.loads(final.read_text())["files"]}
    assert {"model.pt", "optimizer.pt", "scheduler.pt", "workload.pt"} <= names, names
    assert onprem.wait_squeue_empty() == [], "an allocation outlived the run"
    assert not list((onprem.home / "clusters").glob("*.json")), "a cluster record was left behind"
    status = subprocess.run(
        [sys.executable, "-m", "orchestrator", "action=status", f"run_id={run_id}"],
        cwd=REPO,
        env=onprem.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert "SUCCEEDED" in status.stdout and "orch-slurm-a" in status.stdout


def _committed_by(stores: Path, run_id: str, generation: int) -> list[int]:
    """The steps ``generation`` committed in any of the run's stores (a replica counts once)."""
    steps = {
        int(m.parent.name.split("-")[1])
        for m in stores.glob(f"*/{run_id}/checkpoints/step-*-g{generation}/MANIFEST.json")
    }
    return sorted(steps)


def test_a_scancel_during_an_upload_restores_the_newest_checkpoint_committed_before_the_handover(
    onprem, baseline
) -> None:
    """A plain scancel (SIGTERM to every process of the allocation, SIGKILL after Slurm's
    KillWait) half way through an upload (files sent, no manifest): the upload may still
    commit in the grace period, before or after the controller's scan. Whichever it is,
    the run restores the newest checkpoint the lost attempt committed, and ends with the
    uninterrupted run's weights."""
    from tests.support.onprem import CLOUD, RUN_TIMEOUT_S
    from tests.support.runs import orchestrate

    run_id = "onprem-graceful"
    run = orchestrate(
        onprem.home,
        run_id,
        *CLOUD,
        "chaos.faults=[{kind:kill_region,during:checkpoint_upload,graceful:true,region:orch-slurm-a}]",
        # Every checkpoint kept: what the lost attempt committed is read from the stores after.
        "checkpoint.keep_last=20",
        env=onprem.env,
        timeout=RUN_TIMEOUT_S,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.result is not None and run.result["status"] == "SUCCEEDED"
    (cut,) = [e for e in run.events("fault_injected") if e["kind"] == "kill_region"]
    assert (cut["during"], cut["graceful"], cut["cancelled"]) == ("checkpoint_upload", True, True), cut
    (incident,) = run.result["incidents"]
    assert (incident["kind"], incident["from_region"], incident["to_region"]) == (
        "cluster_lost",
        "orch-slurm-a",
        "orch-slurm-b",
    )
    # Nothing newer is lost: the restore is the newest step the lost attempt committed,
    # in any store (the upload the cancel cut may have landed in the grace period).
    committed = _committed_by(onprem.home.parent / "stores", run_id, 1)
    moved = [(e["restored_step"], e["moved_from"]) for e in run.events("fence") if e.get("moved_from") is not None]
    where = f"committed by attempt 1: {committed}; cut at step {cut['step']}; fences moved: {moved}"
    assert incident["restored_step"] == max(committed, default=0), where
    assert run.result["weights_sha256"] == baseline.result["weights_sha256"], where
    assert onprem.wait_squeue_empty() == [], "an allocation outlived the run"
    print(where)
