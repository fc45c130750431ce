"""replay(): what a resumed controller learns from the journal a crashed one left."""

from __future__ import annotations

from typing import Any

from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.replay import replay
from recovery.fencing import Link

T = 1000.0


def ev(type_: str, **fields: Any) -> dict[str, Any]:
    global T
    T += 1.0
    return {"ts": T, "type": type_, **fields}


def _up_to_running(gen: int = 1, region: str = "local-a", restored: int = 0) -> list[dict[str, Any]]:
    name = f"r-{region}-g{gen}"
    return [
        ev("transition", **{"from": "PENDING" if gen == 1 else "RECOVERING", "to": "PROVISIONING"}),
        ev("attempt_started", generation=gen, region=region),
        ev("provisioned", region=region, cluster=name, address="a:1", purpose="attempt", generation=gen, info={}),
        ev("fence", generation=gen, restored_step=restored),
        ev("runtime_started", generation=gen, pid=4242),
        ev("transition", **{"from": "PROVISIONING", "to": "RUNNING"}),
    ]


def test_a_crash_mid_training_leaves_one_open_attempt_to_adopt() -> None:
    events = [ev("run_started", run_id="r"), *_up_to_running(), ev("fault_injected", kind="controller_crash", step=150)]
    rp = replay(events)
    assert rp.state is RunState.RUNNING
    assert rp.open_attempt is not None
    assert (rp.open_attempt.generation, rp.open_attempt.region, rp.open_attempt.runtime_pid) == (1, "local-a", 4242)
    assert rp.open_attempt.cluster is not None and rp.open_attempt.cluster["cluster"] == "r-local-a-g1"
    assert list(rp.leftover) == ["r-local-a-g1"]
    assert rp.launching == [] and rp.generation == 1 and rp.last_step == 150
    assert rp.lineage.links == (Link(1, 0),)
    assert not rp.finished


def test_a_crash_mid_launch_names_the_cluster_that_may_exist() -> None:
    events = [
        ev("run_started", run_id="r"),
        ev("transition", **{"from": "PENDING", "to": "PROVISIONING"}),
        ev("attempt_started", generation=1, region="local-a"),
    ]
    rp = replay(events)
    assert rp.state is RunState.PROVISIONING
    assert rp.launching == [("local-a", 1)]
    assert rp.open_attempt is not None and rp.open_attempt.cluster is None
    assert rp.leftover == {}


def test_a_crash_during_a_failover_keeps_the_decision_and_the_open_incident() -> None:
    incident = {
        "kind": "cluster_lost",
        "from_region": "local-a",
        "to_region": "local-b",
        "failed_at": 1.0,
        "detected_at": 2.0,
        "last_step": 60,
        "restored_step": None,
        "first_step_at": None,
        "generation": 1,
    }
    events = [
        ev("run_started", run_id="r"),
        *_up_to_running(),
        ev("attempt_ended", generation=1, region="local-a", last_step=60, outcome="cluster_lost"),
        ev("decision", action="failover", region="local-b", failure="cluster_lost", failed_region="local-a"),
        ev("incident_opened", **incident),
        ev("transition", **{"from": "RUNNING", "to": "RECOVERING"}),
    ]
    rp = replay(events)
    assert rp.state is RunState.RECOVERING and rp.next_region == "local-b"
    assert rp.open_attempt is None
    assert rp.pending is not None and (rp.pending.kind, rp.pending.last_step) == ("cluster_lost", 60)
    assert rp.history.failovers == 1 and "local-a" in rp.history.region_failed_at
    # The failed cluster's background teardown never happened: it is left to sweep.
    assert list(rp.leftover) == ["r-local-a-g1"]
    # Once the incident closes, nothing is pending.
    closed = replay([*events, *_up_to_running(2, "local-b", 50), ev("incident", **{**incident, "restored_step": 50})])
    assert closed.pending is None and len(closed.incidents) == 1
    assert closed.generation == 2 and closed.lineage.links == (Link(1, 0), Link(2, 50))


def test_teardowns_and_a_finished_run() -> None:
    events = [
        ev("run_started", run_id="r"),
        *_up_to_running(),
        ev("teardown", cluster="r-local-a-g1"),
        ev("attempt_ended", generation=1, region="local-a", last_step=500, outcome="succeeded"),
        ev("transition", **{"from": "RUNNING", "to": "SUCCEEDED"}),
        ev("run_finished", status="SUCCEEDED"),
    ]
    rp = replay(events)
    assert rp.state.terminal and rp.finished
    assert rp.leftover == {} and rp.open_attempt is None
    assert rp.attempts[0]["outcome"] == "succeeded"
