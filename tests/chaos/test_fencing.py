"""A zombie of an old attempt (a partitioned region that comes back) cannot make its checkpoints win."""

from __future__ import annotations

from recovery.fencing import Lineage
from recovery.store import CheckpointStore
from support import orchestrate, ray_pids, wait_no_new_ray


def test_partitioned_region_resumes_as_a_zombie_and_is_fenced(orch_home):
    ref = orchestrate(orch_home, "zombie-ref", "job.steps=2000")  # the same job, never failed
    assert ref.returncode == 0, ref.stderr[-3000:]
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "zombie",
        "job.steps=2000",
        "recovery.heartbeat_timeout_s=3",
        "chaos.faults=[{kind:partition_region,at_step:100,duration_s:10}]",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and r["region"] == "local-b"
    assert r["weights_sha256"] == ref.result["weights_sha256"]
    (inc,) = r["incidents"]
    assert inc["kind"] == "lease_expired"
    # The zombie came back and tried to commit into its old store: refused, journaled.
    fenced = run.events("fenced_write")
    assert fenced and all(e["attempt"] == 1 and e["by"] == "zombie" for e in fenced), fenced
    fence = run.events("fence")
    assert [f["generation"] for f in fence] == [1, 2]
    # Nothing the zombie wrote after the takeover is committed anywhere.
    lineage = Lineage().then(1, 0).then(2, fence[1]["restored_step"])
    home = run.run_dir.parent.parent
    for region in ("local-a", "local-b", "local-c"):
        store = CheckpointStore(f"file://{home}/stores/{region}", region=region)
        for step in store.committed_steps("zombie"):
            m = store.manifest("zombie", step)
            assert lineage.allows(m.attempt, m.step), (region, step, m.attempt)
    assert not wait_no_new_ray(before)
