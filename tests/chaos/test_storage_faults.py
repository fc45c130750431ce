"""Storage faults through the fault proxy, in front of real S3 and GCS servers.

Every run here uses cloud=local_cloudstores (S3, S3, GCS) and 2000 steps, so that
training is still going while a fault lasts. Every surviving run must end with
the weights of the same config run without faults.
"""

from __future__ import annotations

import pytest

from support import orchestrate, ray_pids, wait_no_new_ray

STEPS = "job.steps=2000"
# Short client timeouts so a hung store fails a call in seconds, not the defaults' 30 s.
QUICK_A = [
    "+cloud.regions.local-a.storage_options.op_timeout_s=3",
    "+cloud.regions.local-a.storage_options.config_kwargs={read_timeout:3,connect_timeout:2}",
]


@pytest.fixture(scope="module")
def reference(orch_home, cloud_stores):
    """The same 2000-step job on the same stores, without faults."""
    run = orchestrate(orch_home, "storage-ref", "cloud=local_cloudstores", STEPS, env=cloud_stores["env"])
    assert run.returncode == 0, run.stderr[-3000:]
    return run.result["weights_sha256"]


def _ok(run, reference):
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.result["status"] == "SUCCEEDED"
    assert run.result["weights_sha256"] == reference
    return run.result


def test_short_outage_training_goes_on_and_commits_again_when_back(orch_home, cloud_stores, reference):
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "outage-short",
        "cloud=local_cloudstores",
        STEPS,
        "recovery.store_outage_s=30",
        "chaos.faults=[{kind:storage_outage,at_step:300,duration_s:3}]",
        env=cloud_stores["env"],
    )
    r = _ok(run, reference)
    assert r["incidents"] == [] and r["region"] == "local-a"
    assert run.events("upload_retry"), "uploads must have failed during the outage"
    assert run.events("upload_recovered"), "and committed again once the store was back"
    assert not run.events("store_fallback")
    assert r["final_checkpoint"].startswith("s3://orch-a/")
    assert not wait_no_new_ray(before)


def test_long_outage_commits_to_the_next_regions_store(orch_home, cloud_stores, reference):
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "outage-long",
        "cloud=local_cloudstores",
        STEPS,
        "recovery.store_outage_s=2",
        "chaos.faults=[{kind:storage_outage,at_step:300}]",
        env=cloud_stores["env"],
    )
    r = _ok(run, reference)
    fallback = run.events("store_fallback")
    assert fallback and (fallback[0]["from"], fallback[0]["to"]) == ("local-a", "local-b")
    assert r["final_checkpoint"].startswith("s3://orch-b/")
    assert r["incidents"] == []
    assert not wait_no_new_ray(before)


def test_hung_store_is_bounded_and_training_goes_on(orch_home, cloud_stores, reference):
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "hang-store",
        "cloud=local_cloudstores",
        STEPS,
        "recovery.store_outage_s=30",
        *QUICK_A,
        "chaos.faults=[{kind:storage_hang,at_step:300,duration_s:4}]",
        env=cloud_stores["env"],
    )
    r = _ok(run, reference)
    assert run.events("upload_retry")
    assert r["final_checkpoint"].startswith("s3://orch-a/")
    assert not wait_no_new_ray(before)


def test_slow_store_newest_snapshot_wins(orch_home, cloud_stores, reference):
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "slow-store",
        "cloud=local_cloudstores",
        STEPS,
        "chaos.faults=[{kind:storage_slow,at_step:300,bandwidth_kbps:400,duration_s:5}]",
        env=cloud_stores["env"],
    )
    _ok(run, reference)
    assert run.events("upload_superseded"), "snapshots taken during a slow upload replace each other"
    assert not wait_no_new_ray(before)


def test_region_and_its_store_lost_restores_a_replica_from_another_store_kind(orch_home, cloud_stores, reference):
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "region-and-store",
        "cloud=local_cloudstores",
        "cloud.candidates=[local-a,local-c,local-b]",
        STEPS,
        "chaos.faults=[{kind:storage_outage,at_step:1000,region:local-a},{kind:kill_region,at_step:1000}]",
        env=cloud_stores["env"],
    )
    r = _ok(run, reference)
    assert r["region"] == "local-c"
    (inc,) = r["incidents"]
    assert inc["restored_step"] > 0
    started = [e for e in run.events("train_started") if e["generation"] == 2]
    assert started[0]["restored_from"].startswith("gs://orch-c/"), started
    assert not wait_no_new_ray(before)


def test_torn_checkpoint_is_never_restored(orch_home, cloud_stores, reference):
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "torn",
        "cloud=local_cloudstores",
        STEPS,
        "chaos.faults=[{kind:torn_checkpoint,at_step:1000,bandwidth_kbps:150}]",
        env=cloud_stores["env"],
    )
    r = _ok(run, reference)
    kill = [e for e in run.events("fault_injected") if e.get("stage") == "kill"]
    assert kill, run.events("fault_injected")
    torn = kill[0]["torn_step"]
    (inc,) = r["incidents"]
    assert inc["restored_step"] < torn
    assert not wait_no_new_ray(before)
