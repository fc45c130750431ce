"""job=digits_hpo (a Ray Tune search with ASHA) that loses its region mid-way: it finishes in
the next one, every trial from its own checkpoint, with its best trial in result.json. The
search's uninterrupted path is the first attempt of this same run."""

from __future__ import annotations

import io
import tarfile

import torch

from tests.support.runs import orchestrate, ray_pids, wait_no_new_ray

MAX_T, RUNGS = 6, {2, 4}  # conf/job/digits_hpo.yaml: max_t 6, grace 2, reduction factor 2


def _newest_checkpoints(archive: bytes) -> dict[str, int]:
    """{trial_id: iteration} of each trial's newest checkpoint inside an experiment snapshot."""
    newest: dict[str, int] = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.name.startswith("trials/") and member.name.endswith("/state.pt"):
                fh = tar.extractfile(member)
                assert fh is not None
                state = torch.load(io.BytesIO(fh.read()), weights_only=True)
                trial = str(state["trial_id"])
                newest[trial] = max(newest.get(trial, 0), int(state["iteration"]))
    return newest


def test_kill_region_mid_search_resumes_every_trial_from_its_checkpoint(orch_home):
    from recovery.store import CheckpointStore

    before = ray_pids()
    run_id = "hpo-kill-region"
    run = orchestrate(
        orch_home,
        run_id,
        "job=digits_hpo",
        "checkpoint.keep_last=100",  # keep the snapshot the second attempt restored, to look inside
        # One trial at a time and a snapshot at every change: the kill at search step 4 lands in
        # the first trial's fourth iteration (the first trial at a rung always goes on), so the
        # snapshot restored holds a trial half way with a checkpoint, the case under test.
        "hpo.max_concurrent=1",
        "hpo.snapshot_interval_s=0",
        "chaos.faults=[{kind:kill_region,at_step:4}]",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED"
    assert (r["region"], r["attempts"]) == ("local-b", 2)
    (inc,) = r["incidents"]
    assert inc["kind"] == "cluster_lost" and (inc["from_region"], inc["to_region"]) == ("local-a", "local-b")
    restored = inc["restored_step"]
    assert 1 <= restored <= 4

    # Every trial reached its final iteration or an ASHA rung, from its last checkpoint,
    # and the best one is in result.json.
    trials = r["trials"]
    assert len({t["trial_id"] for t in trials}) == 6
    assert all(t["status"] == "TERMINATED" and t["checkpoint_iteration"] == t["iteration"] for t in trials), trials
    assert all(t["iteration"] == MAX_T or t["iteration"] in RUNGS for t in trials), trials
    assert r["search"]["rungs"] == sorted(RUNGS)
    best = r["best_trial"]
    assert best["metric"] == "accuracy" and best["mode"] == "max"
    assert best["value"] == max(t["metrics"]["accuracy"] for t in trials)
    assert best["config"].keys() == {"lr", "hidden_size"} and best["value"] >= 0.9
    assert r["metrics"]["accuracy"] == best["value"] and len(r["weights_sha256"]) == 64
    # The experiment went to the store as verified snapshots, replicated on from the new region.
    assert r["final_checkpoint"].startswith(f"file://{orch_home}/stores/local-b/")
    assert "local-c" in {e["to"] for e in run.events("replicated") if e.get("generation") == 2}
    # A telemetry record per trial, no GPU claimed.
    tele = r["telemetry"]
    assert tele["workers"] and tele["gpu"] is None and tele["gpu_absent_reason"]
    assert all(w["samples_per_s"] > 0 and w["peak_rss_bytes"] > 0 for w in tele["workers"])

    # What the second attempt restored: the snapshot in local-b's store, verified.
    from recovery.signing import run_keys_of

    store = CheckpointStore(f"file://{orch_home}/stores/local-b", region="local-b", key=run_keys_of(str(run.run_dir)))
    manifest = store.manifest(run_id, restored)
    assert manifest is not None and store.verify(run_id, restored).ok
    in_snapshot = {t["trial_id"]: t for t in manifest.extra["trials"]}
    newest = _newest_checkpoints(store.read(manifest, "experiment.tar"))
    events = [e for e in run.events("trial_started") + run.events("trial_restored") if e.get("generation") == 2]
    resumed = {e["trial_id"]: e["iteration"] for e in events if e["type"] == "runtime.trial_restored"}
    started = {e["trial_id"] for e in events if e["type"] == "runtime.trial_started"}
    assert resumed, "no trial was resumed: the kill came too early or too late to test resumption"
    for trial_id, snap in in_snapshot.items():
        if snap["status"] == "TERMINATED":
            assert trial_id not in resumed and trial_id not in started, f"{trial_id} finished, yet ran again"
        elif trial_id in newest:
            # Never from scratch when it had a checkpoint; exactly from that checkpoint.
            assert trial_id not in started, f"{trial_id} had a checkpoint, yet started from scratch"
            assert resumed[trial_id] == newest[trial_id] == snap["checkpoint_iteration"], (trial_id, snap)
    assert set(resumed) <= set(newest)
    assert not wait_no_new_ray(before)
