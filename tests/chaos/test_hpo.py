"""A Ray Tune search with ASHA over a user's workload class (outside the repository, its keys
named by config path, each trial a Ray Train run of two DDP workers) that loses its region
mid-way: it finishes in the next one, every trial from its own checkpoint and with exactly
the weights of the same trial trained in one go, the best trial in result.json.
(job=digits_hpo itself runs in tests/integration/test_readme.py.)"""

from __future__ import annotations

import dataclasses
import io
import shutil
from pathlib import Path

import torch

from tests.support.paths import REPO
from tests.support.runs import orchestrate, ray_pids, wait_no_new_ray
from tests.support.search import named_trials, search_json

FIXTURES = REPO / "tests" / "fixtures"


def _newest_checkpoints(store, run_id: str, manifest, max_t: int) -> dict[str, int]:
    """{trial_id: iteration} of each trial's checkpoint an experiment snapshot names (each
    a signed checkpoint of its own in the store)."""
    newest: dict[str, int] = {}
    for trial_id, files in named_trials(store, run_id, manifest, max_t).items():
        state = torch.load(io.BytesIO(files["state.pt"]), weights_only=True)
        assert str(state["trial_id"]) == trial_id
        newest[trial_id] = int(state["iteration"])
    return newest


# --- a user's workload class, searched by config path -------------------------------------------------

USER_MAX_T, USER_RUNGS = 4, {1, 2}  # grace period 1, reduction factor 2 (digits_hpo's)
TRIAL_WORKERS = 2  # each trial a Ray Train run of two DDP workers
USER_TRIALS = 3
USER_SEARCH = (
    "job=digits_hpo",
    "job.workload=tinywork:Tiny",
    "job.batch_size=32",
    "job.params.samples=1024",
    "~hpo.search_space.lr",
    "~hpo.search_space.hidden_size",
    "hpo.search_space.job.params.hidden=choice 8 16 32",
    "hpo.search_space.job.params.gamma=quniform 0.25 1.0 0.25",
    "hpo.search_space.job.lr=loguniform 0.01 0.3",
    "hpo.search_space.trainer.grad_clip_norm=uniform 0.5 2.0",
    "hpo.search_alg=optuna",
    f"hpo.num_samples={USER_TRIALS}",
    f"hpo.max_t={USER_MAX_T}",
    "hpo.grace_period=1",
    "hpo.steps_per_iteration=10",
    "hpo.snapshot_interval_s=0",
    "trainer.grad_accum_steps=2",
    f"hpo.trial.workers={TRIAL_WORKERS}",
)


_search_json = search_json


def _uninterrupted_sha(spec_path: Path, trial_index: int, iteration: int, values: dict, out: Path) -> str:
    """The trial's weights at ``iteration`` when trained in one go (no restore): its two DDP
    ranks in forked processes here, as its Ray Train workers train it."""
    from orchestrator.runtime.search.trial import trial_inputs
    from orchestrator.wire.spec import RuntimeSpec
    from providers.local.provider import free_port
    from tests.support.runs import run_forked_ranks

    spec = RuntimeSpec.load(str(spec_path))
    assert spec.hpo is not None and spec.hpo.trial.workers == TRIAL_WORKERS
    runtime = trial_inputs(spec, dataclasses.replace(spec.hpo, max_t=iteration), [])
    port = free_port()
    args = [(runtime, trial_index, values, rank, port, out) for rank in range(TRIAL_WORKERS)]
    assert run_forked_ranks(_trial_rank, args, deadline_s=120) == [0] * TRIAL_WORKERS
    return out.read_text()


def _trial_rank(runtime: dict, index: int, values: dict, rank: int, port: int, out: Path) -> None:
    import torch.distributed as dist

    from orchestrator.runtime.loop.weights import weights_sha256
    from orchestrator.runtime.search.trial import TrialLoop

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=TRIAL_WORKERS)
    loop = TrialLoop(runtime, index, values, rank, TRIAL_WORKERS)
    loop.run(0, lambda *_: None)
    if rank == 0:
        out.write_text(weights_sha256(loop.model.state_dict()))
    dist.destroy_process_group()


def test_a_user_workload_searched_by_path_loses_its_region_and_every_trial_ends_with_its_uninterrupted_weights(
    orch_home, tmp_path, monkeypatch
):
    from recovery.signing import run_keys_of
    from recovery.store import CheckpointStore

    folder = tmp_path / "user-project"
    folder.mkdir()
    shutil.copy(FIXTURES / "tinywork.py", folder / "tinywork.py")
    before = ray_pids()
    run_id = "hpo-kill-region"
    run = orchestrate(
        orch_home,
        run_id,
        *USER_SEARCH,
        "checkpoint.keep_last=100",  # keep the snapshot the second attempt restored, to look inside
        # One trial at a time and a snapshot at every change: the kill at search step 3 lands in
        # the first trial's third iteration (the first trial at a rung always goes on), so the
        # snapshot restored holds a trial half way with a checkpoint, the case under test.
        "hpo.max_concurrent=1",
        "chaos.faults=[{kind:kill_region,at_step:3}]",
        env={"PYTHONPATH": str(folder)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED"
    assert (r["region"], r["attempts"]) == ("local-b", 2)
    (inc,) = r["incidents"]
    assert inc["kind"] == "cluster_lost" and (inc["from_region"], inc["to_region"]) == ("local-a", "local-b")
    restored = inc["restored_step"]
    assert 1 <= restored <= 3

    # Every trial reached its final iteration or an ASHA rung, from its last checkpoint, its
    # values named by their config paths and its metrics all the workload's evaluate() gave.
    trials = r["trials"]
    assert len({t["trial_id"] for t in trials}) == USER_TRIALS
    assert all(t["status"] == "TERMINATED" and t["checkpoint_iteration"] == t["iteration"] for t in trials), trials
    assert all(t["iteration"] == USER_MAX_T or t["iteration"] in USER_RUNGS for t in trials), trials
    assert r["search"]["rungs"] == sorted(USER_RUNGS)
    keys = {"job.params.hidden", "job.params.gamma", "job.lr", "trainer.grad_clip_norm"}
    assert all(t["config"].keys() == keys and t["metrics"].keys() == {"accuracy", "loss_calls"} for t in trials)
    best = r["best_trial"]
    assert best["metric"] == "accuracy" and best["mode"] == "max" and best["config"].keys() == keys
    assert best["value"] == max(t["metrics"]["accuracy"] for t in trials)
    assert r["metrics"]["accuracy"] == best["value"] and len(r["weights_sha256"]) == 64
    # The experiment went to the store as verified snapshots, replicated on from the new region.
    assert r["final_checkpoint"].startswith(f"file://{orch_home}/stores/local-b/")
    assert "local-c" in {e["to"] for e in run.events("replicated") if e.get("generation") == 2}
    # A telemetry record per worker of each trial (two ranks each), no GPU claimed.
    tele = r["telemetry"]
    assert tele["workers"] and tele["gpu"] is None and tele["gpu_absent_reason"]
    assert all(w["samples_per_s"] > 0 and w["peak_rss_bytes"] > 0 for w in tele["workers"])
    ranks: dict[str, list[int]] = {}
    for w in tele["workers"]:
        ranks.setdefault(w["trial_id"], []).append(w["trial_rank"])
    assert all(sorted(got) == [0, 1] for got in ranks.values()), ranks

    # What the second attempt restored: the snapshot in local-b's store, verified.
    store = CheckpointStore(f"file://{orch_home}/stores/local-b", region="local-b", key=run_keys_of(str(run.run_dir)))
    manifest = store.manifest(run_id, restored)
    assert manifest is not None and store.verify(run_id, restored).ok
    in_snapshot = {t["trial_id"]: t for t in manifest.extra["trials"]}
    newest = _newest_checkpoints(store, run_id, manifest, USER_MAX_T)
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
    # A resumed trial's checkpoint, read from the new region's store, is named again as it is:
    # not uploaded a second time until the trial moves past it.
    again = {(e["trial_id"], e["iteration"]) for e in run.events("trial_checkpointed") if e.get("generation") == 2}
    assert not set(resumed.items()) & again, again

    # Each trial's curve: journaled per iteration, a TensorBoard run of its own.
    curves = {e["trial_id"] for e in run.events("trial_result")}
    assert curves == {t["trial_id"] for t in trials}
    assert {p.name for p in (run.run_dir / "tensorboard" / "trials").iterdir()} == curves

    # Every trial, resumed or not, ends with the weights it has when trained in one go.
    monkeypatch.syspath_prepend(str(folder))
    spec = run.run_dir / "attempts" / "g1" / "spec.json"
    for t in trials:
        index = int(t["trial_id"].split("_")[1])
        want = _uninterrupted_sha(spec, index, t["iteration"], t["config"], tmp_path / f"{t['trial_id']}.sha")
        assert t["weights_sha256"] == want, t
    # The best trial's final weights are in the store, a signed checkpoint of its own that the
    # final snapshot names: result.json points at it, and its model.pt holds those weights.
    from orchestrator.runtime.loop.weights import weights_sha256
    from orchestrator.runtime.search.trial_store import trial_run
    from recovery.store import parse_step_folder

    best = r["best_trial"]
    where = f"file://{orch_home}/stores/local-b/{trial_run(run_id, best['trial_id'])}/checkpoints/"
    assert best["checkpoint"].startswith(where), best
    for t in trials:  # every trial's final weights, beside the final snapshot
        assert t["checkpoint"].startswith(f"file://{orch_home}/stores/local-b/{trial_run(run_id, t['trial_id'])}/")
    at, gen = parse_step_folder(best["checkpoint"].rsplit("/", 1)[1]) or (0, None)
    assert at == best["checkpoint_iteration"] == best["iteration"] and gen in (1, 2)
    m, verdict, files = store.load(trial_run(run_id, best["trial_id"]), at, keep=lambda _: True, generation=gen)
    assert m is not None and verdict.ok, verdict
    model = torch.load(io.BytesIO(files["model.pt"]), weights_only=True)
    assert weights_sha256(model) == best["weights_sha256"] == r["weights_sha256"]
    # What the snapshots put into the store (benchmarks/search_uploads.py reads it from here):
    # every trial checkpoint journaled, the snapshots counting those they stood on.
    from benchmarks.search_uploads import figures

    journal = run.journal()
    up = figures(journal)
    checkpointed = [e for e in journal if e.get("type") == "runtime.trial_checkpointed"]
    assert up["snapshots"] >= 2 and 0 < up["trial_checkpoints_uploaded"] <= len(checkpointed)
    assert 0 < up["bytes_uploaded"] and up["bytes_if_held"] > 0
    # Optuna's log, replayed here in a fresh searcher from the final snapshot, proposes every
    # trial's values again: the searcher the second attempt rebuilt went on as the lost one
    # would have, given the same results in the same order.
    from orchestrator.hpo.replay import OptunaReplay

    final = store.manifest(run_id, r["final_step"])
    assert final is not None and store.verify(run_id, r["final_step"]).ok
    state = _search_json(store.read(final, "experiment.tar"))
    configs = [t["config"] for t in sorted(trials, key=lambda t: t["trial_id"])]
    asks, tells = (sum(e[0] == kind for e in state["searcher"]) for kind in ("ask", "tell"))
    assert asks == tells == USER_TRIALS
    OptunaReplay.replay(dict(state_space(run.run_dir)), 0, "max", USER_TRIALS, state["searcher"], configs)
    assert not wait_no_new_ray(before)


def state_space(run_dir: Path) -> dict[str, str]:
    """The search space as the run saved it (config paths)."""
    from orchestrator.wire.spec import RuntimeSpec

    spec = RuntimeSpec.load(str(run_dir / "attempts" / "g1" / "spec.json"))
    assert spec.hpo is not None
    return dict(spec.hpo.search_space)


def test_population_based_training_loses_its_region_and_keeps_every_exploit_decision(orch_home):
    """PBT's decisions before the loss are in the snapshot the next region restored, and the
    search goes on from them: the same population, each trial with the values they gave it."""
    from recovery.signing import run_keys_of
    from recovery.store import CheckpointStore

    before = ray_pids()
    run_id = "hpo-pbt-kill-region"
    run = orchestrate(
        orch_home,
        run_id,
        "job=digits_hpo",
        "checkpoint.keep_last=100",
        "hpo.scheduler=pbt",
        "hpo.num_samples=4",
        "hpo.max_concurrent=4",
        "hpo.cpus_per_trial=0.5",  # the population trains side by side: its members meet at each interval
        "hpo.max_t=6",
        # A decision at every iteration for the bottom half: some land before the loss,
        # whatever the order the results come in.
        "hpo.perturbation_interval=1",
        "hpo.quantile_fraction=0.5",
        # Iterations long enough (about 0.2 s here) that the four trials overlap: a trial
        # that raced through all its iterations before the next one started would meet
        # no population, and PBT would decide nothing.
        "hpo.steps_per_iteration=200",
        "hpo.snapshot_interval_s=0",
        "chaos.faults=[{kind:kill_region,at_step:16}]",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and (r["region"], r["attempts"]) == ("local-b", 2)
    exploits = r["search"]["exploits"]
    (inc,) = r["incidents"]
    store = CheckpointStore(f"file://{orch_home}/stores/local-b", region="local-b", key=run_keys_of(str(run.run_dir)))
    manifest = store.manifest(run_id, inc["restored_step"])
    assert manifest is not None and store.verify(run_id, inc["restored_step"]).ok
    restored = _search_json(store.read(manifest, "experiment.tar"))
    kept = restored["pbt"]
    assert kept, "no exploit before the region was lost: the kill came too early to test keeping them"
    assert exploits[: len(kept)] == kept  # every decision before the loss, in order, then the new ones
    journaled = [
        {k: e[k] for k in ("trial_id", "donor_id", "iteration", "donor_iteration", "values")}
        for e in run.events("pbt_exploit")
    ]
    assert journaled[: len(kept)] == kept
    # Each trial ended with the values its last decision gave it (or its own, never exploited),
    # and a trial's donor keeps the integer keys (the model's width) a checkpoint was made with.
    from orchestrator.hpo import sample_configs

    drawn = sample_configs({"lr": "loguniform 0.01 0.2", "hidden_size": "choice 32 64 128"}, 4, 0)
    for t in r["trials"]:
        mine = [e for e in exploits if e["trial_id"] == t["trial_id"]]
        assert t["status"] == "TERMINATED" and t["iteration"] == 6, t
        assert t["config"] == (mine[-1]["values"] if mine else drawn[int(t["trial_id"][-5:])]), t
    for e in exploits:
        donor_before = [d for d in exploits if d["trial_id"] == e["donor_id"] and exploits.index(d) < exploits.index(e)]
        donor_values = donor_before[-1]["values"] if donor_before else drawn[int(e["donor_id"][-5:])]
        assert e["values"]["hidden_size"] == donor_values["hidden_size"], e
    assert not wait_no_new_ray(before)


# --- a trial's checkpoint corrupted in every store, then the region lost ----------------------

CORRUPT_SEARCH = (
    "job=digits_hpo",
    "hpo.scheduler=fifo",  # every trial runs to max_t: the same trials end where they would
    "hpo.num_samples=3",
    "hpo.max_t=4",
    "hpo.steps_per_iteration=200",  # long enough that a trial is mid-way at the faults' step
    "hpo.snapshot_interval_s=0",
)


def test_a_snapshot_whose_trial_checkpoint_is_corrupt_everywhere_is_passed_over_and_the_search_ends_exact(
    orch_home,
):
    """The newest snapshot verifies, yet the checkpoint it names of a trial that will resume
    does not, in any store: the next region passes that snapshot over (journaled with the
    trial and why), restores an older one whole, and every trial ends with the weights of
    the same search never interrupted."""
    from tests.support.invariants import fired

    before = ray_pids()
    base = orchestrate(orch_home, "hpo-corrupt-base", *CORRUPT_SEARCH)
    assert base.returncode == 0 and base.result is not None, base.stderr[-3000:]
    faults = "chaos.faults=[{kind:corrupt_checkpoint,at_step:9},{kind:kill_region,at_step:9}]"
    run = orchestrate(orch_home, "hpo-corrupt", *CORRUPT_SEARCH, faults)
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and (r["region"], r["attempts"]) == ("local-b", 2)
    (corrupt,) = fired(run, "corrupt_checkpoint")
    (step,) = set(corrupt["corrupted"].values())
    skipped = [e for e in run.events("checkpoint_skipped") if e["step"] == step and e.get("generation") == 2]
    assert skipped and all("is in no store whole" in e["reason"] for e in skipped), skipped
    (inc,) = r["incidents"]
    assert inc["restored_step"] < step
    want = {t["trial_id"]: t["weights_sha256"] for t in base.result["trials"]}
    assert {t["trial_id"]: t["weights_sha256"] for t in r["trials"]} == want
    assert r["weights_sha256"] == base.result["weights_sha256"]
    assert not wait_no_new_ray(before)
