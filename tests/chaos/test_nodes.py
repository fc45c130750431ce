"""Multi-node regions: a lost node replaced in place, a hung one, an elastic resume.

Real Ray nodes on this machine (a region of two nodes of one CPU each, one worker on
each), real faults (``kill_node``: SIGKILL to every process of worker node 1;
``hang_node``: SIGSTOP to them), and the uninterrupted digits run's weights as the
measure: a node replaced in time leaves the weights exact; a run that goes on with
fewer workers ends close to them, and bitwise equal to its own continuation at that
world size.
"""

from __future__ import annotations

import io
from pathlib import Path
from urllib.parse import urlsplit

import torch

from benchmarks import node_loss, recovery
from tests.support.invariants import INTERVAL, fired, journal_consistent, nothing_left, survived
from tests.support.runs import Run, orchestrate, ray_pids

TWO_NODES = ("cloud.regions.local-a.nodes=2", "cloud.regions.local-a.num_cpus=1")
# local-b: one node of one CPU, one worker: too small for a fixed world of two.
ONE_CPU_B = ("cloud.regions.local-b.num_cpus=1",)
# What an elastic resume may move the weights by
# (tests/unit/orchestrator/runtime/loop/test_train_loop_elastic.py measures the loop's own;
# README "Elastic resume"): the largest parameter difference and the held-out loss's.
TOL_PARAM = 1e-4
TOL_LOSS = 1e-4


def _faults(*faults: str) -> str:
    return "chaos.faults=[" + ",".join(faults) + "]"


def final_params(run: Run) -> dict[str, torch.Tensor]:
    url = run.result["final_checkpoint"]  # type: ignore[index]
    data = (Path(urlsplit(url).path) / "model.pt").read_bytes()
    return torch.load(io.BytesIO(data), weights_only=True)


def max_distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


# The invariant matrix's kill_worker row (tests/chaos/test_matrix.py): a worker killed at
# every trigger point, Ray Train restarting the group in place each time; here its
# worker is the one on the region's second node.
KILL_WORKER = (
    "{kind:kill_worker,at_step:20}",
    "{kind:kill_worker,during:checkpoint_upload}",
    "{kind:kill_worker,at_step:101}",
    "{kind:kill_worker,during:restore}",
)


def test_workers_lost_nodes_lost_and_hung_are_restarted_in_place_exactly_and_a_too_small_region_is_skipped(
    orch_home, baseline
):
    before = ray_pids()
    faults = _faults(
        *KILL_WORKER,
        "{kind:kill_node,at_step:160}",
        "{kind:hang_node,at_step:260,node:1}",
        "{kind:kill_region,at_step:360}",
    )
    run = orchestrate(
        orch_home, "nodes-replaced", *TWO_NODES, *ONE_CPU_B, faults, "trainer.max_worker_restarts=8", timeout=600
    )
    r = survived(run, baseline)  # the uninterrupted run's weights: nothing moved them
    assert [len(fired(run, k)) for k in ("kill_worker", "kill_node", "hang_node", "kill_region")] == [4, 1, 1, 1]
    assert {"checkpoint_upload", "restore"} <= {e.get("during") for e in fired(run, "kill_worker")}
    # A fault can strike a recovery still under way (a kill during the restore that follows
    # a kill): then one incident covers both.
    assert 1 <= len([i for i in r["incidents"] if i["kind"] == "worker_lost"]) <= 4, r["incidents"]
    # Survivors keep their processes: each rank that left a broken group is, with the same
    # pid, that rank of the next world that trained (journaled rank by rank), unless a
    # fault struck the recovery itself (the kill during the restore takes rank 0).
    kept, leaving = 0, None
    for e in run.journal():
        if e["type"] == "runtime.group_left":
            leaving = e
        elif e["type"] == "fault_injected":
            leaving = None
        elif e["type"] == "runtime.train_started" and leaving is not None:
            assert e["worker_pids"][leaving["rank"]] == leaving["pid"], (leaving, e)
            kept, leaving = kept + 1, None
    assert kept >= 5, run.events("group_left")
    # A replacement is the spare waiting on its node where there is one (journaled): it
    # trains at its rank in the next world, unless a fault strikes first.
    handed, matched = [], 0
    for e in run.journal():
        if e["type"] == "runtime.spare_taken":
            handed.append(e)
        elif e["type"] == "fault_injected":
            handed = []
        elif e["type"] == "runtime.train_started":
            for h in handed:
                assert e["worker_pids"][h["rank"]] == h["pid"], (h, e)
                matched += 1
            handed = []
    assert matched >= 1 and "replacement" in {e["restart"] for e in run.events("spare_taken")}
    # The replacement's state came from the survivor's memory, checked against the signed
    # manifest; the store was read only where no survivor held the checkpoint (the kill
    # during a restore took the rank that held it).
    restores = {e["epoch"]: e for e in run.events("peer_restore")}
    timeline = [(e["type"], e.get("step"), e.get("kind"), e.get("during")) for e in run.journal()]
    for e in restores.values():
        assert all(f["reason"] == "no survivor holds it" for f in e["from_store"]), e
        assert (e["bytes_from_store"] > 0) == bool(e["from_store"]), e
    for step in (150, 250):  # the node losses: nothing from the store
        (e,) = [e for e in restores.values() if e["step"] == step]
        assert e["bytes_from_peer"] > 0 and e["bytes_from_store"] == 0, (e, timeline)
    assert not run.events("restored_from_scratch")  # in place, nothing is read back at all
    # (kill_region may take node 1 a moment before the head: a third node_lost, no incident.)
    assert [(e["node"], e["health"], e["replacing"]) for e in run.events("node_lost")][:2] == [
        (1, "gone", True),
        (1, "not_up", True),
    ]
    assert len(run.events("node_replaced")) == 2
    lost = [i for i in r["incidents"] if i["kind"] == "node_lost"]
    assert len(lost) == 2, r["incidents"]
    for inc in lost:
        # In place, at the full world, on the replacement: at most one interval lost.
        assert (inc["from_region"], inc["to_region"]) == ("local-a", "local-a"), inc
        assert (inc["world_size_before"], inc["world_size_after"]) == (2, 2), inc
        assert inc["replace_s"] is not None and inc["rto_s"] is not None, inc
        assert 0 <= inc["lost_steps"] <= INTERVAL, inc
    # The region lost: local-b (one worker fits, trainer.min_workers is 2) is passed over.
    (region,) = [i for i in r["incidents"] if i["kind"] == "cluster_lost"]
    assert region["to_region"] == "local-c", region
    (decision,) = run.events("decision")
    assert decision["region"] == "local-c" and "skipped local-b: 1 worker(s) fit" in decision["reason"], decision
    assert {e["world_size"] for e in run.events("runtime.train_started")} == {2}
    from orchestrator.commands.status import render, summarize

    text = render("nodes-replaced", summarize(str(run.run_dir)))
    assert "world      2/2 workers" in text and "node 1, replaced in" in text, text
    assert (run.run_dir / "report.png").exists()
    journal_consistent(run)
    nothing_left(before, orch_home)


def test_an_elastic_run_goes_on_with_fewer_workers_and_fails_over_into_a_one_node_region(orch_home, baseline):
    before = ray_pids()
    elastic = (
        *TWO_NODES,
        *ONE_CPU_B,
        "cloud.candidates=[local-a,local-b]",
        "trainer.min_workers=1",
        "recovery.node_replace_timeout_s=0",
    )
    node = "{kind:kill_node,at_step:120}"
    run = orchestrate(orch_home, "nodes-elastic", *elastic, _faults(node, "{kind:kill_region,at_step:320}"))
    # Its own continuation at one worker: the same loss of a node, no region lost.
    same = orchestrate(orch_home, "nodes-elastic-ref", *elastic, _faults(node))
    for done in (run, same):
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.result is not None and done.result["status"] == "SUCCEEDED", done.result
    r = run.result
    assert r is not None
    (lost,) = [i for i in r["incidents"] if i["kind"] == "node_lost"]
    assert (lost["world_size_before"], lost["world_size_after"], lost.get("replace_s")) == (2, 1, None), lost
    assert run.events("node_lost")[0]["replacing"] is False
    (region,) = [i for i in r["incidents"] if i["kind"] == "cluster_lost"]
    assert (region["from_region"], region["to_region"]) == ("local-a", "local-b"), region
    worlds = [(e["region"], e["world_size"], e["workers"]) for e in run.events("runtime.train_started")]
    assert worlds == [("local-a", 2, 2), ("local-a", 1, 2), ("local-b", 1, 2)], worlds
    # Resumed in local-b at the world it had: bitwise its own uninterrupted continuation.
    assert r["weights_sha256"] == same.result["weights_sha256"]  # type: ignore[index]
    # Close to the run that never shrank (reduction order moves the last bits).
    assert max_distance(final_params(run), final_params(baseline)) <= TOL_PARAM
    assert abs(r["metrics"]["eval_loss"] - baseline.result["metrics"]["eval_loss"]) <= TOL_LOSS  # type: ignore[index]
    # What benchmarks/node_loss.py (pytest -m bench) and recovery.py read of such runs is here.
    elastic_row = node_loss.row_of(same.result, "kill_node", same.journal())  # type: ignore[arg-type]
    assert elastic_row["world_after"] == 1 and elastic_row["replace_s"] is None and elastic_row["rto_s"] > 0
    # Every world journals its ranks' pids; a world that shrinks starts the survivor's process again too.
    assert [len(e["worker_pids"]) for e in same.events("train_started")] == [2, 1]
    assert elastic_row["survivor_restarts"] == 1
    # ...on the spare waiting on its node: the group started again takes it, no new process.
    (taken,) = same.events("spare_taken")
    assert (taken["restart"], taken["rank"]) == ("group", 0) and taken["waited_s"] >= 0, taken
    assert same.events("train_started")[1]["worker_pids"] == [taken["pid"]]
    # That restart reads the head node's local copy where it holds the checkpoint: some do
    # (timing's choice), and only steps that were committed.
    scratch = [e["step"] for done in (run, same) for e in done.events("restored_from_scratch")]
    assert scratch and set(scratch) <= set(range(50, 320, 50)), scratch
    cold = node_loss.row_of(r, "kill_region")
    assert cold["rto_s"] == region["rto_s"] and cold["lost_steps"] >= 0
    failover = recovery.phases(run.journal(), region)
    assert all(v >= 0 for v in failover.values()) and failover["total (RTO)"] == region["rto_s"], failover
    journal_consistent(run)
    nothing_left(before, orch_home)


def test_an_elastic_group_goes_on_without_a_lost_node_before_ray_lets_it_go(orch_home):
    """The driver acts on the controller's word (orchestrator/runtime/group/lost_nodes.py): once
    every node's spare is ready (about 6 s into training here), a node killed is found by
    its silent spare, its worker ended and the smaller group placed off it, with no wait
    for Ray's health checks; the group's one worker is the surviving node's spare."""
    before = ray_pids()
    elastic = (*TWO_NODES, "job.steps=2000", "trainer.min_workers=1", "recovery.node_replace_timeout_s=0")
    run = orchestrate(orch_home, "nodes-elastic-early", *elastic, _faults("{kind:kill_node,at_step:1500}"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.result is not None and run.result["status"] == "SUCCEEDED", run.result
    (found,) = run.events("lost_nodes_found")
    assert found["lost"] == [1] and len(found["nodes"]) == 1 and len(found["killed_ranks"]) == 1, found
    (fault,) = fired(run, "kill_node")
    assert not [e for e in run.events("world_waiting") if e["ts"] >= fault["ts"]], "it waited for Ray"
    assert [e["world_size"] for e in run.events("train_started")] == [2, 1]
    (taken,) = run.events("spare_taken")
    assert taken["restart"] == "group" and run.events("train_started")[1]["worker_pids"] == [taken["pid"]]
    journal_consistent(run)
    nothing_left(before, orch_home)


def test_a_lost_node_s_worker_goes_on_at_once_on_a_spare_node_exactly(orch_home, long_baseline):
    """A region of three nodes for two workers: the idle one is a spare node, with its
    spare imported (orchestrator/runtime/group/spare_nodes.py). A node that runs a worker is killed
    (the drawn node is one that does): its worker goes on on the spare node's spare at
    once, the survivor keeps its process, the state comes from the survivor's memory,
    and the lost node is replaced in the background, with no wait for it."""
    before = ray_pids()
    three = ("cloud.regions.local-a.nodes=3", "cloud.regions.local-a.num_cpus=1", "job.steps=2000")
    # At step 1200 (about 4 s in: every spare ready), with 800 steps left for the
    # replacement to be journaled while the run trains.
    run = orchestrate(orch_home, "nodes-standby", *three, _faults("{kind:kill_node,at_step:1200}"))
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r is not None and r["status"] == "SUCCEEDED", r
    assert r["weights_sha256"] == long_baseline.result["weights_sha256"], "not the uninterrupted run's weights"
    (fault,) = fired(run, "kill_node")
    (lost,) = run.events("node_lost")
    assert (lost["node"], lost["fits"], lost["replacing"]) == (fault["node"], 2, True), lost
    waits = [e["reason"] for e in run.events("world_waiting") if e["ts"] >= fault["ts"]]
    assert not [w for w in waits if "replacement" in w], waits
    started = run.events("train_started")
    before_pids, after = started[0]["worker_pids"], started[1]
    (left,) = run.events("group_left")
    assert after["worker_pids"][left["rank"]] == left["pid"] == before_pids[left["rank"]], "the survivor restarted"
    (taken,) = run.events("spare_taken")
    assert taken["restart"] == "replacement" and after["worker_pids"][taken["rank"]] == taken["pid"], taken
    assert taken["pid"] not in before_pids
    (restore,) = run.events("peer_restore")
    assert restore["bytes_from_peer"] > 0 and restore["bytes_from_store"] == 0, restore
    (inc,) = [i for i in r["incidents"] if i["kind"] == "node_lost"]
    assert (inc["world_size_before"], inc["world_size_after"]) == (2, 2), inc
    assert 0 <= inc["lost_steps"] <= INTERVAL, inc
    assert run.events("node_replaced"), "the lost node is replaced all the same (the next spare node)"
    journal_consistent(run)
    nothing_left(before, orch_home)


def test_losing_the_spare_node_restarts_nothing_and_the_next_restart_is_its_own_faults(orch_home, long_baseline):
    """Four nodes for two workers (with three, Ray may leave the head idle, which no node
    fault strikes); a worker node that runs no worker (node_role: idle, from the ranks'
    worker_nodes) is killed: training goes on untouched, the node is replaced in the
    background, and no incident is owed. A worker killed later is recorded as that
    (worker_lost), not taken for the node's restart."""
    before = ray_pids()
    four = ("cloud.regions.local-a.nodes=4", "cloud.regions.local-a.num_cpus=1", "job.steps=2000")
    faults = _faults("{kind:kill_node,at_step:600,node_role:idle}", "{kind:kill_worker,at_step:1400}")
    run = orchestrate(orch_home, "nodes-idle", *four, faults)
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r is not None and r["status"] == "SUCCEEDED", r
    assert r["weights_sha256"] == long_baseline.result["weights_sha256"], "not the uninterrupted run's weights"
    started = run.events("train_started")
    (struck,) = fired(run, "kill_node")
    assert struck["node"] not in started[0]["worker_nodes"], (struck, started[0])
    (lost,) = run.events("node_lost")
    assert (lost["node"], lost["held_workers"]) == (struck["node"], False), lost
    assert run.events("node_replaced"), "the spare node is replaced all the same"
    # One restart, the killed worker's: the survivor kept its process.
    assert len(started) == 2, started
    (inc,) = r["incidents"]
    assert inc["kind"] == "worker_lost", inc
    (left,) = run.events("group_left")
    assert started[1]["worker_pids"][left["rank"]] == started[0]["worker_pids"][left["rank"]]
    journal_consistent(run)
    nothing_left(before, orch_home)
