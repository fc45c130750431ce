"""job=gpt under trainer.strategy=fsdp at two workers: its checkpoints are sharded (one
file of shards per rank, one signed manifest). A lost node, its rank replaced while
the newest checkpoint's last shards file is corrupted in every store (a replacement that
must read it finds it bad and the group passes over the checkpoint together; a survivor
holding it loads its own from memory), then a lost region whose newest checkpoint then
has one rank's shard corrupted, end with exactly the weights of its uninterrupted run:
the corrupted step skipped by a reason naming the file, the one before it restored with
each rank reading its own file of shards alone. So does a run
whose rank is killed half way through its first sharded upload (nothing committed for
that step), whose worker is killed later and which is preempted: each lost worker is
replaced alone, the survivor keeping its process and loading its own shards from its
memory.
A two-node region that loses a node goes on at one worker from a resharded checkpoint,
then at two again in the next region (resharded back), and ends within the elastic
tolerance of the run that never shrank."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.invariants import fired, nothing_left
from tests.support.runs import Run, orchestrate, ray_pids

STEPS = 60
JOB = ("job=gpt", f"job.steps={STEPS}", "checkpoint.interval_steps=10", "trainer.strategy=fsdp", "trainer.workers=2")


@pytest.fixture(scope="module")
def fsdp_baseline(orch_home):
    run = orchestrate(orch_home, "fsdp-baseline", *JOB, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def _ended(orch_home: Path, run_id: str, *overrides: str) -> tuple[Run, dict[str, Any]]:
    """A faulted fsdp run of JOB, which must end SUCCEEDED at its last step."""
    run = orchestrate(orch_home, run_id, *JOB, *overrides, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r is not None and r["status"] == "SUCCEEDED" and r["final_step"] == STEPS, r
    return run, r


def _files(url: str) -> set[str]:
    return {f["name"] for f in json.loads((Path(url.removeprefix("file://")) / "MANIFEST.json").read_text())["files"]}


def test_a_lost_node_a_lost_region_and_corrupt_shards_end_with_the_uninterrupted_weights(
    orch_home, fsdp_baseline
) -> None:
    base = fsdp_baseline.result
    assert base["status"] == "SUCCEEDED" and base["final_step"] == STEPS
    assert {"shard-r0.pt", "shard-r1.pt", "shards.json"} <= _files(base["final_checkpoint"])
    assert "model.pt" not in _files(base["final_checkpoint"])
    before = ray_pids()
    run, r = _ended(
        orch_home,
        "fsdp-faults",
        # A region of two nodes, a worker on each: rank 1's node is lost, and as the group
        # forms again around the survivor, rank 1's shards of the newest checkpoint are
        # corrupted in every store; later the region is lost, and the newest checkpoint is
        # corrupted again as the next region restores it.
        "cloud.regions.local-a.nodes=2",
        "cloud.regions.local-a.num_cpus=1",
        "chaos.faults=[{kind:kill_node,at_step:15},{kind:corrupt_checkpoint,during:restore,region:local-a},"
        "{kind:kill_region,at_step:35},{kind:corrupt_checkpoint,during:restore,region:local-b}]",
        "recovery.region_cooldown_s=0",
    )
    assert r["weights_sha256"] == base["weights_sha256"]
    started = run.events("train_started")
    assert {e["world_size"] for e in started} == {2}
    (lost,) = fired(run, "kill_node")
    # Which rank ran on the node lost is Ray's placement (the head's node or the other).
    victim = started[0]["worker_nodes"].index(lost["node"])
    corrupted = [set(e["corrupted"].values()) for e in fired(run, "corrupt_checkpoint")]
    assert corrupted == [{10}, {30}], corrupted
    skipped = {e["step"]: e["reason"] for e in run.events("checkpoint_skipped") if e["step"] in (10, 30)}
    (peer,) = run.events("peer_restore")
    assert peer["joining"] == [victim], peer
    shards = {e["rank"]: e for e in run.events("restore_shards") if e["generation"] == 1 and e["step"] == 10}
    if victim == 1:
        # The replacement streamed its file of step 10 (the one corrupted: the last rank's)
        # from the store and found it bad: the group passed over step 10 together, before
        # any rank loaded, and began again from the seed.
        assert skipped[10].startswith("failed verification while restoring (rank 1)") and "shard-r1.pt" in skipped[10]
        assert peer["step"] is None and r["incidents"][0]["restored_step"] == 0, (peer, r["incidents"])
    else:
        # The survivor (rank 1) loaded its own file of step 10 from its memory: the copy
        # corrupted in the stores was never read, and step 10 restored.
        assert 10 not in skipped and peer["step"] == 10 and r["incidents"][0]["restored_step"] == 10, skipped
        assert shards[1]["from_memory"] == ["shard-r1.pt"] and shards[0]["from_memory"] == [], shards
    assert [i["kind"] for i in r["incidents"]] == ["node_lost", "cluster_lost"], r["incidents"]
    assert r["incidents"][1]["restored_step"] == 20, r["incidents"]
    # In the next region the corrupted step 30 was skipped by a reason naming the file, and
    # step 20 restored with each rank reading its own file of shards alone.
    assert "shard-r1.pt" in skipped[30], skipped
    restored = [e for e in run.events("restore_shards") if e["generation"] == 2 and e["step"] < 30]
    assert sorted((e["step"], e["rank"], tuple(e["read"])) for e in restored) == [
        (20, 0, ("shard-r0.pt",)),
        (20, 1, ("shard-r1.pt",)),
    ], restored
    nothing_left(before, orch_home)


def test_a_rank_killed_mid_upload_a_lost_worker_and_a_preemption_end_with_the_uninterrupted_weights(
    orch_home, fsdp_baseline
) -> None:
    before = ray_pids()
    faults = "{kind:kill_worker,during:checkpoint_upload},{kind:kill_worker,at_step:25},{kind:preempt,at_step:45}"
    run, r = _ended(orch_home, "fsdp-workers", f"chaos.faults=[{faults}]")
    assert r["weights_sha256"] == fsdp_baseline.result["weights_sha256"]
    (mid_upload,) = [e for e in fired(run, "kill_worker") if e.get("during") == "checkpoint_upload"]
    assert mid_upload["step"] == 10, mid_upload
    # The upload it cut short committed nothing: the restarted group began again at step 0.
    started = run.events("train_started")
    assert [e["restored_step"] for e in started][:3] == [0, 0, 20], started
    # Preempted: the notice's checkpoint restored by the next attempt, nothing lost.
    assert started[-1]["restored_step"] >= 45 and started[-1]["generation"] == 2, started
    kinds = [i["kind"] for i in r["incidents"]]
    assert kinds == ["worker_lost", "worker_lost", "preempted"], r["incidents"]
    assert r["incidents"][-1]["lost_steps"] == 0, r["incidents"]
    # Survivors kept under FSDP: each kill replaced its victim alone, and the survivor kept
    # its process. At step 25 it loaded its own shards of step 20 from its memory, the
    # replacement streamed its own from the store, and nothing else came from the store.
    pids = [e["worker_pids"] for e in started if e["generation"] == 1]
    assert len(pids) == 3, started
    for was, now in itertools.pairwise(pids):
        assert len({*was} & {*now}) == 1, pids
    first, second = run.events("peer_restore")
    assert first["step"] is None and second["step"] == 20, (first, second)
    (victim,) = second["joining"]
    assert second["bytes_from_memory"] > 0 and second["bytes_from_store"] > 0, second
    assert [f["file"] for f in second["from_store"]] == [f"shard-r{victim}.pt"], second
    shards = {e["rank"]: e for e in run.events("restore_shards") if e["step"] == 20 and e["generation"] == 1}
    assert shards[1 - victim]["from_memory"] == [f"shard-r{1 - victim}.pt"], shards
    assert shards[victim]["from_memory"] == [] and shards[victim]["read"] == [f"shard-r{victim}.pt"], shards
    assert not run.events("placement_reused"), "no group restarted whole"
    nothing_left(before, orch_home)


# The elastic promise (docs/guides/workloads.md, "Elastic resume"): the held-out loss
# within this of the run that never shrank.
TOL_LOSS = 1e-4


def test_a_lost_node_reshards_to_one_worker_and_the_next_region_back_to_two(orch_home, fsdp_baseline) -> None:
    before = ray_pids()
    run, r = _ended(
        orch_home,
        "fsdp-elastic",
        "cloud.regions.local-a.nodes=2",
        "cloud.regions.local-a.num_cpus=1",
        "cloud.candidates=[local-a,local-c]",
        "trainer.min_workers=1",
        "recovery.node_replace_timeout_s=0",
        "chaos.faults=[{kind:kill_node,at_step:25},{kind:kill_region,at_step:45}]",
    )
    worlds = [(e["region"], e["world_size"], e["restored_step"]) for e in run.events("runtime.train_started")]
    assert worlds == [("local-a", 2, 0), ("local-a", 1, 20), ("local-c", 2, 40)], worlds
    # The smaller group asked for a placement group of its own: the old one had a bundle
    # on the lost node, which Ray would try to place again without pause.
    assert not run.events("placement_reused")
    # Each restore resharded: at one worker rank 0 read both ranks' files of step 20; back
    # at two, each rank read the one file step 40 was written in.
    reads = sorted((e["step"], e["rank"], tuple(e["read"]), e["saved_world"]) for e in run.events("restore_shards"))
    assert reads == [
        (20, 0, ("shard-r0.pt", "shard-r1.pt"), 2),
        (40, 0, ("shard-r0.pt",), 1),
        (40, 1, ("shard-r0.pt",), 1),
    ], reads
    base = fsdp_baseline.result["metrics"]["eval_loss"]
    assert abs(r["metrics"]["eval_loss"] - base) <= TOL_LOSS, (r["metrics"], base)
    nothing_left(before, orch_home)
