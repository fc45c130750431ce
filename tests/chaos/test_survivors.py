"""Survivors keep their processes; a state planted in their memory cannot pass; a world
wider than two restores exactly too.

One region of one node, two workers: the worker on rank 1 is killed while every rank's
in-memory copy of its newest checkpoints has a byte flipped (``corrupt_peer_state``).
The survivor must not roll back onto its own bad copy, nor the replacement onto the
one the survivor sends it: both check what they load against the signed manifest and
read that file from the store instead, journaled with the reason, and the run ends
with the uninterrupted run's weights.

Four workers (half a CPU each): beyond two ranks the order a gradient is summed in
depends on DDP's bucket layout, which a new wrapper lays out anew
(orchestrator/runtime/loop/ddp.py); a worker lost and a region lost still end with the
weights of the four-worker run that never failed.
"""

from __future__ import annotations

from tests.support.invariants import fired, journal_consistent, nothing_left, survived
from tests.support.runs import orchestrate, ray_pids


def test_a_corrupted_in_memory_state_is_caught_by_whoever_loads_it_and_the_store_read_instead(orch_home, baseline):
    before = ray_pids()
    faults = "chaos.faults=[{kind:corrupt_peer_state,at_step:120},{kind:kill_worker,at_step:120}]"
    run = orchestrate(orch_home, "survivors-corrupt", faults)
    r = survived(run, baseline)
    assert [len(fired(run, k)) for k in ("corrupt_peer_state", "kill_worker")] == [1, 1]
    (inc,) = r["incidents"]
    assert inc["kind"] == "worker_lost" and inc["restored_step"] == 100, inc
    # The survivor (rank 0) kept its process; rank 1 is new.
    before_pids, after_pids = [e["worker_pids"] for e in run.events("train_started")]
    assert before_pids[0] == after_pids[0] and before_pids[1] != after_pids[1], (before_pids, after_pids)
    (left,) = run.events("group_left")
    assert (left["rank"], left["pid"], left["step"]) == (0, before_pids[0], 120), left
    (restore,) = run.events("peer_restore")
    assert restore["step"] == 100 and restore["joining"] == [1], restore
    reasons = {(f["rank"], f["file"]): f["reason"] for f in restore["from_store"]}
    assert reasons == {
        (0, "model.pt"): "the bytes from memory do not match the signed manifest's sha256",
        (1, "model.pt"): "the bytes from peer do not match the signed manifest's sha256",
    }, restore
    # Everything else came from the survivor's memory: its own, and what it sent.
    assert restore["bytes_from_peer"] > 0 and restore["bytes_from_memory"] > 0, restore
    assert restore["bytes_from_store"] > 0, restore
    journal_consistent(run)
    nothing_left(before, orch_home)


FOUR = ("trainer.workers=4", "trainer.cpus_per_worker=0.5")


def test_four_workers_restored_from_peers_and_in_another_region_end_with_the_uninterrupted_weights(orch_home):
    before = ray_pids()
    base = orchestrate(orch_home, "four-baseline", *FOUR)
    assert base.returncode == 0 and base.result is not None, base.stderr[-3000:]
    faults = "chaos.faults=[{kind:kill_worker,at_step:120},{kind:kill_region,at_step:320}]"
    run = orchestrate(orch_home, "four-faults", *FOUR, faults)
    r = survived(run, base)
    assert [i["kind"] for i in r["incidents"]] == ["worker_lost", "cluster_lost"], r["incidents"]
    assert {e["world_size"] for e in run.events("train_started")} == {4}
    (restore,) = run.events("peer_restore")
    assert restore["bytes_from_store"] == 0 and restore["bytes_from_peer"] > 0, restore
    journal_consistent(run)
    nothing_left(before, orch_home)
