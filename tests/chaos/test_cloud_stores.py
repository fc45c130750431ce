"""The digits job with its checkpoints in S3 and GCS (real servers), losing a region."""

from __future__ import annotations

from support import orchestrate, ray_pids, wait_no_new_ray


def test_kill_region_on_object_stores_ends_exactly_and_replicates_across_kinds(orch_home, baseline, cloud_stores):
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "cloud-kill-region",
        "cloud=local_cloudstores",
        "chaos.faults=[{kind:kill_region,at_step:60}]",
        env=cloud_stores["env"],
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED"
    assert r["weights_sha256"] == baseline.result["weights_sha256"]
    assert r["region"] == "local-b"
    assert r["final_checkpoint"].startswith("s3://orch-b/stores/cloud-kill-region/checkpoints/step-500")
    assert len(r["incidents"]) == 1 and r["incidents"][0]["restored_step"] == 50
    replicated_to = {e["to"] for e in run.events("replicated")}
    assert "local-c" in replicated_to, "checkpoints must reach the GCS region"
    assert not wait_no_new_ray(before)
