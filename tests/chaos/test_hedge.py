"""Hedged provisioning on real local clusters (``recovery.hedge_max_launches``): the
region is partitioned (frozen whole) for a few seconds, inside the heartbeat lease, so the
next region's cluster is launched at the missed heartbeats and torn down when they come
again, with no failover; then a preemption notice hedges again, and the failover that
follows takes that cluster (its runtime already up and waiting). The run ends with the
uninterrupted run's weights, and nothing is left running."""

from __future__ import annotations

from tests.support.invariants import journal_consistent, nothing_left
from tests.support.runs import orchestrate, ray_pids


def test_a_hedge_is_cancelled_when_the_region_answers_and_taken_when_it_is_lost(orch_home, long_baseline) -> None:
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "hedged",
        "job.steps=2000",
        "recovery.hedge_max_launches=2",
        # The lease is 10 s: a 5 s partition is a sign (no heartbeat for 2.5 s), never a loss.
        # The whole region: with the driver alone stopped, the workers would train on to the
        # preemption's step within the partition.
        "chaos.faults=[{kind:partition_region,at_step:100,duration_s:5},{kind:preempt,at_step:1000,grace_s:15}]",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and r["weights_sha256"] == long_baseline.result["weights_sha256"]
    (incident,) = r["incidents"]  # the partition was no loss: only the preemption is one
    assert incident["kind"] == "preempted"

    journal = run.journal()
    first, second = [e for e in journal if e["type"] == "hedge_started"]
    assert first["from_region"] == "local-a" and first["reason"].startswith("no heartbeat for ")
    assert second["reason"] == "a preemption notice" and second["launches"] == 2
    (cancelled,) = [e for e in journal if e["type"] == "hedge_cancelled"]
    assert cancelled["region"] == first["region"] and "answered again" in cancelled["reason"]
    # The cancelled hedge's cluster went before the preemption's hedge was launched.
    hedged = [e for e in journal if e["type"] == "provisioned" and e.get("purpose") == "standby"]
    assert len(hedged) == 2
    (torn,) = [i for i, e in enumerate(journal) if e["type"] == "teardown" and e["cluster"] == hedged[0]["cluster"]]
    assert torn < journal.index(second)
    # The failover took the second: the run finished on it, with no launch of its own.
    (activated,) = run.events("standby_activated")
    assert activated["cluster"] == hedged[1]["cluster"] and r["region"] == activated["region"]
    journal_consistent(run)
    nothing_left(before, orch_home)
