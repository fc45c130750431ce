"""Real faults against real clusters: every surviving run ends bitwise equal to the baseline.

kill_region, kill_worker, hang_region, a corrupt checkpoint met during a restore and a
user error restarted in place, then given up on, live in the invariant matrix
(test_matrix.py); the controller_crash drill in test_drills.py. The policy's decision
for every failure kind is unit-tested step by step (tests/unit/orchestrator/control/test_controller.py)."""

from __future__ import annotations

import pytest

from tests.support.runs import orchestrate, ray_pids, wait_no_new_ray


def _survived(run, baseline):
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED"
    assert r["final_step"] == 500
    assert r["weights_sha256"] == baseline.result["weights_sha256"]
    assert len(r["incidents"]) == 1, r["incidents"]
    return r, r["incidents"][0]


def test_kill_region_with_a_warm_standby_activates_it_exactly(orch_home, baseline):
    before = ray_pids()
    run = orchestrate(orch_home, "standby", "recovery=warm_standby", "chaos.faults=[{kind:kill_region,at_step:200}]")
    r, inc = _survived(run, baseline)
    assert r["region"] == "local-b"
    assert (inc["from_region"], inc["to_region"]) == ("local-a", "local-b")
    attempts = run.events("attempt_started")
    assert [a["standby"] for a in attempts] == [False, True]
    assert run.events("standby_activated")[0]["region"] == "local-b"
    # Every cluster, standbys included, is torn down by the end.
    provisioned = {e["cluster"] for e in run.events("provisioned")}
    torn_down = {e["cluster"] for e in run.events("teardown")}
    assert provisioned <= torn_down
    assert not wait_no_new_ray(before)
    _tensorboard_marks_the_incident(run, inc)


def _tensorboard_marks_the_incident(run, inc):
    """The TensorBoard files as TensorBoard reads them: one loss curve to the last step
    (the replayed steps after the restore written over the lost ones), and a marker at
    the step the run went on from."""
    from tests.support.tbread import shown

    tb = shown(run.run_dir / "tensorboard")
    restored = inc["restored_step"]
    assert tb.restarts == [1, restored + 1]
    assert tb.steps("train/loss") == list(range(5, 501, 5))
    assert tb.scalars["incidents/count"] == [(restored, 1.0)]
    assert tb.scalars["incidents/rto_s"] == [(restored, pytest.approx(inc["rto_s"]))]
    (table,) = tb.texts["incidents"][-1:]
    assert table[0] == restored and f"| 1 | {inc['kind']} | local-a | local-b |" in table[1]
