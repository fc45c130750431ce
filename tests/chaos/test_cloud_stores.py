"""The digits job with its checkpoints in S3 and GCS (real servers), losing a region."""

from __future__ import annotations

from servers import scoped_env
from support import orchestrate, ray_pids, wait_no_new_ray


def test_kill_region_on_object_stores_ends_exactly_and_replicates_across_kinds(orch_home, baseline, cloud_stores):
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "cloud-kill-region",
        "cloud=local_cloudstores",
        "chaos.faults=[{kind:kill_region,at_step:60}]",
        # The control channel in object storage too, as a cloud run has it.
        "cloud.control_store=s3://orch-a/control",
        "+cloud.control_options.endpoint_url=${oc.env:ORCH_LOCAL_S3_A}",
        env=cloud_stores["env"],
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert not (run.run_dir / "control").exists()
    control = cloud_stores["servers"]["local-a"]
    with scoped_env(cloud_stores["env"]):
        from recovery.storage import open_fs

        fs, _ = open_fs("s3://orch-a", {"endpoint_url": control.endpoint})
        assert fs.exists("orch-a/control/cloud-kill-region/control/g2/final.json")
    r = run.result
    assert r["status"] == "SUCCEEDED"
    assert r["weights_sha256"] == baseline.result["weights_sha256"]
    assert r["region"] == "local-b"
    assert r["final_checkpoint"].startswith("s3://orch-b/stores/cloud-kill-region/checkpoints/step-500")
    assert len(r["incidents"]) == 1 and r["incidents"][0]["restored_step"] == 50
    replicated_to = {e["to"] for e in run.events("replicated")}
    assert "local-c" in replicated_to, "checkpoints must reach the GCS region"
    assert not wait_no_new_ray(before)
    _no_secret_anywhere(run, cloud_stores)


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
