"""A search over a user's unchanged Ray Train function (the example project's
``seqmodels.raytrain:train_func``) over one ``job.params`` key, with ASHA, that loses its
region mid-way: it ends SUCCEEDED in the next region, the trial under way goes on from
its newest checkpoint in the verified snapshot (the function's own ``get_checkpoint()``
hands it back: its next report is the next epoch, not the first), and every iteration
reported before and after the loss reports the same numbers (the function is exact)."""

from __future__ import annotations

import json

from tests.support.paths import REPO
from tests.support.runs import orchestrate, ray_pids, wait_no_new_ray
from tests.support.search import named_trials

SEARCH = (
    "job.train_func=seqmodels.raytrain:train_func",
    "job.params.train_size=512",
    "job.params.eval_size=256",
    "job.params.epochs=4",
    "hpo.enabled=true",
    "hpo.search_space.job.params.lr=loguniform 0.003 0.03",
    "hpo.num_samples=2",
    "hpo.max_t=4",
    # One trial at a time and a snapshot at every change: the kill at search step 3 lands in
    # the first trial's third report, so the snapshot restored holds it half way.
    "hpo.max_concurrent=1",
    "hpo.snapshot_interval_s=0",
    "checkpoint.keep_last=100",
    "chaos.faults=[{kind:kill_region,at_step:3}]",
)


def test_a_train_function_searched_loses_its_region_and_its_trials_go_on_from_their_checkpoints(orch_home):
    from recovery.signing import run_keys_of
    from recovery.store import CheckpointStore

    before = ray_pids()
    run_id = "hpo-func-kill-region"
    run = orchestrate(orch_home, run_id, *SEARCH, env={"PYTHONPATH": str(REPO / "examples" / "seqproj")})
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and (r["region"], r["attempts"]) == ("local-b", 2)
    (inc,) = r["incidents"]
    assert inc["kind"] == "cluster_lost" and (inc["from_region"], inc["to_region"]) == ("local-a", "local-b")
    trials = r["trials"]
    assert {t["trial_id"] for t in trials} == {"trial_00000", "trial_00001"}
    assert all(t["status"] == "TERMINATED" and t["config"].keys() == {"job.params.lr"} for t in trials)
    # The function's own numbers are the trials' metrics; ASHA's top rung is hpo.max_t.
    assert all({"accuracy", "loss", "epoch"} <= t["metrics"].keys() for t in trials)
    best = r["best_trial"]
    assert best["metric"] == "accuracy" and r["metrics"]["accuracy"] == best["value"]
    # A function's weights are its own: the run names the best trial's checkpoint by its
    # files' digest, proved against the signed snapshot's records.
    assert r["weights_sha256"] is None and r["checkpoint_sha256"] == best["checkpoint_sha256"]
    assert all(len(t["checkpoint_sha256"]) == 64 for t in trials)

    # What the second attempt restored: the snapshot in local-b's store, verified, with the
    # half-way trial's folder as the function wrote it.
    store = CheckpointStore(f"file://{orch_home}/stores/local-b", region="local-b", key=run_keys_of(str(run.run_dir)))
    manifest = store.manifest(run_id, inc["restored_step"])
    assert manifest is not None and store.verify(run_id, manifest.step).ok
    # Each half-way trial's folder is a signed checkpoint of its own, which the snapshot names.
    named = named_trials(store, run_id, manifest, 1 << 20)
    state = {t: json.loads(files["func.json"]) for t, files in named.items()}
    assert state, "the kill came too early or too late: no trial was half way with a checkpoint"
    assert all("files/checkpoint.pt" in files for files in named.values())

    events = [e for e in run.events("trial_started") + run.events("trial_restored") if e.get("generation") == 2]
    resumed = {e["trial_id"]: e["iteration"] for e in events if e["type"] == "runtime.trial_restored"}
    assert resumed == {t: s["iteration"] for t, s in state.items()}
    assert not {e["trial_id"] for e in events if e["type"] == "runtime.trial_started"} & set(resumed)

    # The function went on from that checkpoint: its first report after the restore is the
    # epoch after it (epochs count from 0), and every report made in both attempts says the
    # same (the uninterrupted numbers, the function being exact).
    results: dict[tuple[int, str, int], dict] = {}
    for e in run.events("trial_result"):
        results[(e["generation"], e["trial_id"], e["iteration"])] = e["metrics"]
    for trial_id, at in resumed.items():
        assert results[(2, trial_id, at + 1)]["epoch"] == at
        both = [it for (g, t, it) in results if g == 1 and t == trial_id and (2, t, it) in results]
        assert both, f"{trial_id}: no iteration reported in both attempts"
        for it in both:
            assert results[(1, trial_id, it)] == results[(2, trial_id, it)], (trial_id, it)
    assert not wait_no_new_ray(before)
