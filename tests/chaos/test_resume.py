"""The controller SIGKILLed during provisioning and during a failover, then
``action=resume``: it ends exactly, with never two attempts at once and no cluster
left behind. (Killed mid-training, it adopts the attempt: the controller_crash drill,
tests/chaos/test_drills.py.)"""

from __future__ import annotations

import signal

from tests.support.invariants import fired, nothing_left, survived
from tests.support.runs import orchestrate, ray_pids


def _crash_then_resume(home, run_id, *overrides):
    crashed = orchestrate(home, run_id, "chaos.supervise=false", *overrides)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert crashed.result is None
    assert fired(crashed, "controller_crash")
    return orchestrate(home, run_id, "action=resume")


def test_crash_during_provisioning_tears_down_the_unjournaled_cluster(orch_home, baseline):
    before = ray_pids()
    run = _crash_then_resume(
        orch_home, "crash-provisioning", "chaos.faults=[{kind:controller_crash,during:provisioning}]"
    )
    survived(run, baseline)
    (crash,) = fired(run, "controller_crash")
    attempts = run.events("attempt_started")
    (crashed,) = [a for a in attempts if a["ts"] < crash["ts"]][-1:]
    swept = [e for e in run.events("teardown") if "never journaled" in e.get("reason", "")]
    name = f"crash-provisioning-{crashed['region']}-g{crashed['generation']}"
    assert [e["cluster"] for e in swept] == [name]
    # Started again where it was, a new generation, once the old cluster was gone.
    (again,) = [a for a in attempts if a["ts"] > crash["ts"]]
    assert (again["region"], again["generation"]) == (crashed["region"], crashed["generation"] + 1)
    assert swept[0]["ts"] < again["ts"]
    nothing_left(before, orch_home)


def test_crash_during_a_failover_resumes_the_failover(orch_home, baseline):
    before = ray_pids()
    run = _crash_then_resume(
        orch_home,
        "crash-failover",
        "chaos.faults=[{kind:kill_region,at_step:60},{kind:controller_crash,during:failover}]",
    )
    r = survived(run, baseline)
    assert r["region"] == "local-b"
    assert [(a["generation"], a["region"]) for a in run.events("attempt_started")] == [(1, "local-a"), (2, "local-b")]
    (inc,) = [i for i in r["incidents"] if i["kind"] == "cluster_lost"]
    assert inc["restored_step"] == 50 and inc["to_region"] == "local-b"
    resumed = run.events("run_resumed")
    assert resumed and resumed[0]["state"] == "RECOVERING"
    nothing_left(before, orch_home)


def test_resume_of_a_finished_run_changes_nothing(orch_home, baseline):
    again = orchestrate(orch_home, "baseline", "action=resume")
    assert again.returncode == 0
    assert "already finished" in again.stderr
    assert again.result == baseline.result
