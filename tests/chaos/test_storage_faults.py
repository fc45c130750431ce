"""Storage faults through the fault proxy, in front of real S3 and GCS servers.

Every run here uses cloud=local_cloudstores (S3, S3, GCS) and 2000 steps, so that
training is still going while a fault lasts. Every surviving run must end with
the weights of the same job run without faults (the shared 2000-step baseline, on
file stores: where checkpoints go never changes the weights).
"""

from __future__ import annotations

import pytest

from tests.support.runs import orchestrate, ray_pids, wait_no_new_ray
from tests.support.servers import scoped_env

STEPS = "job.steps=2000"
# Short client timeouts so a hung store fails a call in seconds, not the defaults' 30 s.
QUICK_A = [
    "+cloud.regions.local-a.storage_options.op_timeout_s=3",
    "+cloud.regions.local-a.storage_options.config_kwargs={read_timeout:3,connect_timeout:2}",
]


@pytest.fixture(scope="module")
def reference(long_baseline):
    """The same 2000-step job without faults (on file stores: the store does not change the weights)."""
    return long_baseline.result["weights_sha256"]


def _ok(run, reference):
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.result["status"] == "SUCCEEDED"
    assert run.result["weights_sha256"] == reference
    return run.result


def test_passing_store_faults_training_goes_on_and_commits_where_it_should(orch_home, cloud_stores, reference):
    """A slow store, a short outage and a hung store, one after another in one run (each
    ends before the next starts): training never waits on the store, snapshots taken
    during a slow upload replace each other, failed uploads are retried (a hung call is
    bounded by the client's timeouts) and commit again to the same store once it is back.
    Between them, faults of the controller's view that must pass too: three health checks
    in a row failing (status_flap) while heartbeats are fresh are glitches, and a dropped
    connection to the runtime (ssh_drop) is re-attached; neither fails anything over nor
    restarts it."""
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "store-faults",
        "cloud=local_cloudstores",
        STEPS,
        "recovery.store_outage_s=30",
        *QUICK_A,
        "chaos.faults=[{kind:storage_slow,at_step:300,bandwidth_kbps:800,duration_s:5},"
        "{kind:storage_outage,at_step:1000,duration_s:3},{kind:storage_hang,at_step:1500,duration_s:4},"
        "{kind:status_flap,at_step:600,count:3},{kind:ssh_drop,at_step:800}]",
        env=cloud_stores["env"],
    )
    r = _ok(run, reference)
    kinds = [e["kind"] for e in run.events("fault_injected")]
    assert {"storage_slow", "storage_outage", "storage_hang", "status_flap", "ssh_drop"} <= set(kinds), kinds
    assert r["incidents"] == [] and r["region"] == "local-a"
    # One attempt, no failover, no restart: the flap's checks were glitches, the runtime re-attached.
    assert r["attempts"] == 1 and not run.events("failure_detected") and not run.events("decision")
    flapped = [g for g in run.events("health_glitch") if "status_flap" in (g.get("detail") or "")]
    assert [g["failed_checks"] for g in flapped] == [1, 2, 3], run.events("health_glitch")
    (cut,) = [e for e in run.events("fault_injected") if e["kind"] == "ssh_drop"]
    assert cut["cut"] == 1
    (again,) = run.events("runtime_reattached")
    assert again["connection_exit"] == 255 and again["generation"] == 1
    assert run.events("upload_superseded"), "snapshots taken during a slow upload replace each other"
    assert run.events("upload_retry"), "uploads must have failed during the outage and the hang"
    assert run.events("upload_recovered"), "and committed again once the store was back"
    assert not run.events("store_fallback")
    assert r["final_checkpoint"].startswith("s3://orch-a/")
    # Two workers: rank 1 put its share of the checkpoints (journaled the first time),
    # and when a fault cut its puts off, rank 0 put them itself: still the exact weights.
    shared = run.events("upload_shared")
    assert shared and shared[0]["bytes_by_rank"].get("1", 0) > 0, shared
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


def test_region_and_its_store_lost_restores_a_replica_from_another_store_kind(orch_home, cloud_stores, reference):
    """A region and its S3 store lost together: the run goes on in the GCS region from
    the replica it holds, with the control channel in object storage as a cloud run has
    it, and none of the run's (fake) credentials in anything it wrote."""
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "region-and-store",
        "cloud=local_cloudstores",
        "cloud.candidates=[local-a,local-c,local-b]",
        STEPS,
        "chaos.faults=[{kind:storage_outage,at_step:1000,region:local-a},{kind:kill_region,at_step:1000}]",
        "cloud.control_store=s3://orch-b/control",
        "+cloud.control_options.endpoint_url=${oc.env:ORCH_LOCAL_S3_B}",
        env=cloud_stores["env"],
    )
    r = _ok(run, reference)
    assert r["region"] == "local-c"
    assert r["final_checkpoint"].startswith("gs://orch-c/stores/region-and-store/checkpoints/step-2000")
    (inc,) = r["incidents"]
    assert inc["restored_step"] > 0
    started = [e for e in run.events("train_started") if e["generation"] == 2]
    assert started[0]["restored_from"].startswith("gs://orch-c/"), started
    assert not wait_no_new_ray(before)
    assert not (run.run_dir / "control").exists()
    with scoped_env(cloud_stores["env"]):
        from recovery.storage import open_fs

        fs, _ = open_fs("s3://orch-b", {"endpoint_url": cloud_stores["servers"]["local-b"].endpoint})
        assert fs.exists("orch-b/control/region-and-store/control/g2/final.json")
    _no_secret_anywhere(run, cloud_stores)


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


def _no_secret_anywhere(run, cloud_stores) -> None:
    """The run had fake credentials in its environment: none may land in anything it wrote."""
    from recovery.storage import open_fs

    secrets = [cloud_stores["env"]["AWS_SECRET_ACCESS_KEY"], cloud_stores["env"]["AWS_ACCESS_KEY_ID"]]
    scanned = 0
    blobs: list[tuple[str, bytes]] = [("stdout", run.stdout.encode()), ("stderr", run.stderr.encode())]
    for path in run.run_dir.rglob("*"):
        if path.is_file():
            blobs.append((str(path), path.read_bytes()))
    env = cloud_stores["env"]
    stores = {
        "s3://orch-a": {"endpoint_url": env["ORCH_LOCAL_S3_A"]},
        "s3://orch-b": {"endpoint_url": env["ORCH_LOCAL_S3_B"]},
        "gs://orch-c": {"endpoint_url": env["ORCH_LOCAL_GCS_C"], "token": "anon", "project": "p"},
    }
    with scoped_env(env):
        for url, opts in stores.items():
            fs, root = open_fs(url, opts)
            for key in fs.find(f"{root}/stores/{run.run_dir.name}"):
                blobs.append((key, fs.cat_file(key)))
    for name, data in blobs:
        scanned += 1
        for secret in secrets:
            assert secret.encode() not in data, f"a credential leaked into {name}"
    assert scanned > 20, "the scan must have seen the journal, result, specs, logs and checkpoints"
