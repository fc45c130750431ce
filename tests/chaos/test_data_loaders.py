"""Both data loaders resume exactly: an interrupted run ends with its own uninterrupted run's weights."""

from __future__ import annotations

import io

import pytest
import torch

from support import orchestrate, ray_pids, wait_no_new_ray


@pytest.fixture(scope="module")
def ray_data_baseline(orch_home):
    before = ray_pids()
    run = orchestrate(orch_home, "ray-data", "data=ray_data")
    assert run.returncode == 0, run.stderr[-3000:]
    assert not wait_no_new_ray(before)
    return run


def test_ray_data_trains_to_accuracy_with_its_own_weights(ray_data_baseline, baseline):
    r = ray_data_baseline.result
    assert r["status"] == "SUCCEEDED" and r["final_step"] == 500
    assert r["metrics"]["accuracy"] >= 0.95
    # Another batch order than sharded's, so other weights: each loader is exact against itself.
    assert r["weights_sha256"] != baseline.result["weights_sha256"]


def test_ray_data_kill_region_resumes_exactly(orch_home, ray_data_baseline):
    before = ray_pids()
    run = orchestrate(
        orch_home, "ray-data-kill-region", "data=ray_data", "chaos.faults=[{kind:kill_region,at_step:120}]"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and r["region"] == "local-b"
    (inc,) = r["incidents"]
    assert inc["kind"] == "cluster_lost" and inc["restored_step"] == 100
    assert r["weights_sha256"] == ray_data_baseline.result["weights_sha256"]
    assert r["metrics"]["accuracy"] >= 0.95
    assert not wait_no_new_ray(before)


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
