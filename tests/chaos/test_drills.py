"""The drills in conf/chaos/ from the CLI: each ends SUCCEEDED, exactly, with its report and plot.

Real runs for the drills whose path is their own: controller_crash in a detached run
(its supervisor resumes the controller; its report and plot stand for every drill's)
and the soak. region_outage and double_region_loss (regions lost), spot_storm (three
preemptions) and worker_loss (a killed worker) run the faults of the invariant
matrix's kill_region, preempt and kill_worker rows (test_matrix.py), which check
their incidents; their configs are checked in tests/unit/orchestrator/config/test_compose_drills.py. Each
real run costs a minute or more on a 2-core machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.invariants import nothing_left, survived
from tests.support.runs import orchestrate, ray_pids


def _drill(home: Path, name: str, baseline):
    run = orchestrate(home, f"drill-{name}", f"chaos={name}", timeout=900)
    r = survived(run, baseline)
    assert "incident report" in run.stdout
    assert (run.run_dir / "report.png").stat().st_size > 10_000
    assert r["incidents"], "a drill without an incident drilled nothing"
    return run, r


def test_the_controller_crash_drill_in_a_detached_run_is_restarted_by_its_supervisor(orch_home, baseline):
    """The drill detached: the run's supervisor resumes the killed controller, which adopts
    the attempt (no failover, nothing lost) and journals why it was restarted; the run,
    followed by action=watch, ends exactly, with its report."""
    import json
    import time

    from tests.support.runs import Run, orch

    before = ray_pids()
    started = orchestrate(orch_home, "drill-controller_crash", "chaos=controller_crash", "detach=true")
    assert started.returncode == 0 and "in the background (supervisor pid " in started.stdout, started.stderr[-2000:]
    watched = orch(orch_home, "action=watch", "run_id=drill-controller_crash", timeout=900)
    run_dir = started.run_dir
    # The watch ends at result.json; the controller writes its report after it, then the supervisor ends.
    from orchestrator.runstate import rundir

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and rundir.controller_alive(str(run_dir), rundir.SUPERVISOR_LOCK):
        time.sleep(0.2)
    result = json.loads((run_dir / "result.json").read_text())
    run = Run(watched.returncode, watched.stdout, watched.stderr, run_dir, result)
    r = survived(run, baseline)
    assert (run_dir / "report.png").stat().st_size > 10_000
    log = (run_dir / "controller.log").read_text()
    assert "supervisor: the controller of run drill-controller_crash died (SIGKILL); resuming it" in log, log[-2000:]
    (restarted,) = run.events("controller_restarted")
    assert (restarted["cause"], restarted["restart"]) == ("SIGKILL", 1)
    assert [i["kind"] for i in r["incidents"]] == ["controller_lost"]
    # Adopted: the attempt trained on while no controller watched; no second cluster,
    # nothing lost.
    assert r["attempts"] == 1 and len(run.events("provisioned")) == 1
    assert run.events("attempt_adopted")[0]["generation"] == 1
    assert r["incidents"][0]["lost_steps"] == 0
    nothing_left(before, orch_home)


@pytest.mark.soak
def test_seeded_soak_of_twenty_random_faults_ends_exactly(orch_home, baseline):
    before = ray_pids()
    run, _r = _drill(orch_home, "soak", baseline)
    injected = run.events("fault_injected")
    assert len(injected) >= 20, [e["kind"] for e in injected]
    assert {e["kind"] for e in injected} >= {"kill_worker", "preempt", "kill_region", "corrupt_checkpoint"}
    nothing_left(before, orch_home)
