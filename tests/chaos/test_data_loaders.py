"""Both data loaders resume exactly: an interrupted run ends with its own uninterrupted run's weights.
(The ray_data pair is one sweep, -m, which also proves a sweep's runs and summary for real.)"""

from __future__ import annotations

import io
import json
import re

import pytest
import torch

from tests.support.runs import Run, orchestrate, ray_pids, wait_no_new_ray

KILL_REGION = "[{kind:kill_region,at_step:70}]"
# Under a third of the digits job's steps: Ray Data's loader reaches the accuracy asked by
# then, and the pair is one of the suite's longest set-ups.
RAY_DATA_STEPS = 150


@pytest.fixture(scope="module")
def ray_data_runs(orch_home) -> list[Run]:
    """The ray_data loader's uninterrupted run, then the same job losing its region at
    step 120: one sweep (-m), two runs one after the other, each with its own run id."""
    before = ray_pids()
    sweep = orchestrate(
        orch_home, "ray-data", "-m", "data=ray_data", f"job.steps={RAY_DATA_STEPS}", f"chaos.faults=[],{KILL_REGION}"
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    assert not wait_no_new_ray(before)
    runs = []
    for run_id in ("ray-data-0", "ray-data-1"):
        run_dir = orch_home / "runs" / run_id
        runs.append(Run(0, sweep.stdout, sweep.stderr, run_dir, json.loads((run_dir / "result.json").read_text())))
    # The summary at the end names both runs with the value each was given, and its result.
    table = sweep.stdout.rstrip().splitlines()[-5:]
    assert table[-1] == "sweep: 2 runs, 2 succeeded", sweep.stdout[-3000:]
    assert re.match(r"RUN ID +chaos\.faults +STATUS +STEP +LOSS +DURATION$", table[0]), table
    for line, value, run in zip(table[1:3], ("[]", KILL_REGION), runs, strict=True):
        loss = f"{run.result['metrics']['eval_loss']:.4g}"
        steps = f"{RAY_DATA_STEPS}/{RAY_DATA_STEPS}"
        assert re.match(rf"{run.run_dir.name} +{re.escape(value)} +SUCCEEDED +{steps} +{re.escape(loss)} +\d", line), (
            table
        )
    return runs


@pytest.fixture(scope="module")
def ray_data_baseline(ray_data_runs: list[Run]) -> Run:
    return ray_data_runs[0]


def test_ray_data_trains_to_accuracy_with_its_own_weights(ray_data_baseline, baseline):
    r = ray_data_baseline.result
    assert r["status"] == "SUCCEEDED" and r["final_step"] == RAY_DATA_STEPS
    assert r["metrics"]["accuracy"] >= 0.95
    # Another batch order than sharded's, so other weights: each loader is exact against itself.
    assert r["weights_sha256"] != baseline.result["weights_sha256"]


def test_ray_data_kill_region_resumes_exactly(ray_data_runs):
    baseline, run = ray_data_runs
    r = run.result
    assert r["status"] == "SUCCEEDED" and r["region"] == "local-b"
    (inc,) = r["incidents"]
    assert inc["kind"] == "cluster_lost" and inc["restored_step"] == 50
    assert r["weights_sha256"] == baseline.result["weights_sha256"]
    assert r["metrics"]["accuracy"] >= 0.95


def test_sharded_checkpoints_carry_the_data_position_and_telemetry_is_per_worker(baseline, orch_home):
    # sharded is the default loader: every chaos test in test_faults.py resumes it exactly.
    from recovery.store import CheckpointStore

    store = CheckpointStore(f"file://{orch_home}/stores/local-a", region="local-a")
    m = store.manifest("baseline", 500)
    state = torch.load(io.BytesIO(store.read(m, "state.pt")), weights_only=True)
    # 1347 rows, 2 workers x 64: 10 steps an epoch; after step 500, epoch 50 begins.
    assert state["data"] == {"loader": "sharded", "epoch": 50, "batch_index": 0, "seed": 0, "steps_per_epoch": 10}
    tele = baseline.result["telemetry"]
    assert [w["rank"] for w in tele["workers"]] == [0, 1]
    for w in tele["workers"]:
        assert w["samples"] == 500 * 64 and w["samples_per_s"] > 0
        assert 0 < w["cpu_percent"] and w["peak_rss_bytes"] > 100 * 1024 * 1024
        # DDP's gradient all-reduce over gloo (TCP): at least the gradients' bytes each step.
        assert w["net_bytes_sent"] > 500 * 4 * 40_000 and w["net_bytes_recv"] > 500 * 4 * 40_000
    assert tele["gpu"] is None and "NVML" in tele["gpu_absent_reason"]


def test_a_ray_data_search_loses_its_region_and_its_trial_resumes_exactly(orch_home):
    """data.loader=ray_data in a search: the trial is a Ray Train run of two workers fed by
    Ray Data; lost at its second iteration, it goes on in the next region from the
    snapshot's checkpoint (the stream sought to that iteration), and the iteration it
    reported before the loss and again after says the same (its weights the same)."""
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "ray-data-search",
        "job=digits_hpo",
        "data=ray_data",
        "hpo.trial.workers=2",
        "hpo.num_samples=1",
        "hpo.max_t=3",
        "hpo.grace_period=1",
        "hpo.steps_per_iteration=10",
        "hpo.snapshot_interval_s=0",
        "chaos.faults=[{kind:kill_region,at_step:2}]",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and (r["region"], r["attempts"]) == ("local-b", 2)
    (trial,) = r["trials"]
    assert (
        trial["status"] == "TERMINATED" and trial["iteration"] == 3 and r["weights_sha256"] == trial["weights_sha256"]
    )
    (restored,) = [e["iteration"] for e in run.events("trial_restored") if e["generation"] == 2]
    assert restored >= 1, "restored from scratch: the snapshot held no checkpoint of the trial"
    results = {(e["generation"], e["iteration"]): e["metrics"] for e in run.events("trial_result")}
    both = [it for (g, it) in results if g == 1 and (2, it) in results]
    assert both and all(results[(1, it)] == results[(2, it)] for it in both), results
    # The trial's telemetry, each of its two workers', as a run's workers report theirs.
    workers = r["telemetry"]["workers"]
    assert [(w["trial_id"], w["trial_rank"]) for w in workers] == [("trial_00000", 0), ("trial_00000", 1)]
    assert all(w["samples"] > 0 and w["peak_rss_bytes"] > 0 for w in workers), workers
    assert not wait_no_new_ray(before)
