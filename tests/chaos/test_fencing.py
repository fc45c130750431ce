"""A zombie of an old attempt (a partitioned region that comes back) cannot make its checkpoints win."""

from __future__ import annotations

import pytest

from recovery.fencing import Lineage
from recovery.store import CheckpointStore
from tests.support.invariants import journal_consistent, nothing_left
from tests.support.runs import orchestrate, ray_pids


# partition_region: the region loses the control channel and its store, so the zombie
# trains on unseen and commits when the partition heals, after the new attempt fenced
# the stores. (partition, the control channel alone, fences the same way; the fence
# itself is unit-tested against every store in tests/unit/orchestrator/control/test_controller.py.)
@pytest.mark.parametrize("kind", ["partition_region"])
def test_partitioned_attempt_is_fenced_then_torn_down_once_reachable(kind, orch_home, long_baseline):
    before = ray_pids()
    run = orchestrate(
        orch_home,
        f"zombie-{kind}",
        # Long enough that the zombie still trains when the new attempt has fenced the stores.
        "job.steps=2000",
        "recovery.heartbeat_timeout_s=3",
        f"chaos.faults=[{{kind:{kind},at_step:100,duration_s:10}}]",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and r["region"] == "local-b"
    assert r["weights_sha256"] == long_baseline.result["weights_sha256"]
    (inc,) = r["incidents"]
    assert inc["kind"] == "lease_expired"
    # The zombie (training on, for `partition`; resumed, for `partition_region`) tried to
    # commit into its old store: refused, journaled.
    fenced = run.events("fenced_write")
    assert fenced and all(e["attempt"] == 1 and e["by"] == "zombie" for e in fenced), fenced
    fence = run.events("fence")
    assert [f["generation"] for f in fence] == [1, 2]
    # Torn down once reachable again, not before.
    (healed,) = run.events("fault_ended")
    (teardown,) = [e for e in run.events("teardown") if e["cluster"].endswith("-g1")]
    assert teardown["ts"] >= healed["ts"]
    # Nothing the zombie wrote after the takeover is committed anywhere.
    lineage = Lineage().then(1, 0).then(2, fence[1]["restored_step"])
    home = run.run_dir.parent.parent
    for region in ("local-a", "local-b", "local-c"):
        store = CheckpointStore(f"file://{home}/stores/{region}", region=region)
        for step in store.committed_steps(f"zombie-{kind}"):
            m = store.manifest(f"zombie-{kind}", step)
            assert lineage.allows(m.attempt, m.step), (region, step, m.attempt)
    journal_consistent(run)
    nothing_left(before, orch_home)
