"""job=digits_hpo end to end: a Ray Tune search with ASHA that ends with its best trial in result.json."""

from __future__ import annotations

from support import orchestrate, ray_pids, wait_no_new_ray

MAX_T, RUNGS = 6, {2, 4}


def test_search_finishes_with_a_best_trial_and_every_trial_accounted_for(orch_home):
    before = ray_pids()
    run = orchestrate(orch_home, "hpo", "job=digits_hpo")
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and r["attempts"] == 1 and r["incidents"] == []
    trials = r["trials"]
    assert len({t["trial_id"] for t in trials}) == 6
    assert all(t["status"] == "TERMINATED" and t["checkpoint_iteration"] == t["iteration"] for t in trials)
    assert all(t["iteration"] == MAX_T or t["iteration"] in RUNGS for t in trials), trials
    assert r["final_step"] == sum(t["iteration"] for t in trials) + len(trials)
    best = r["best_trial"]
    assert best["metric"] == "accuracy" and best["mode"] == "max"
    assert best["value"] == max(t["metrics"]["accuracy"] for t in trials) >= 0.9
    assert {"lr", "hidden_size"} == best["config"].keys()
    assert r["search"]["rungs"] == sorted(RUNGS)
    # The experiment went to the store as verified snapshots, replicated to the other regions.
    assert r["final_checkpoint"].endswith(f"/hpo/checkpoints/step-{r['final_step']}")
    assert {e["to"] for e in run.events("replicated")} == {"local-b", "local-c"}
    # One telemetry record per trial, no GPU claimed.
    tele = r["telemetry"]
    assert len(tele["workers"]) == 6 and tele["gpu"] is None and tele["gpu_absent_reason"]
    assert all(w["samples_per_s"] > 0 and w["peak_rss_bytes"] > 0 for w in tele["workers"])
    assert not wait_no_new_ray(before)
