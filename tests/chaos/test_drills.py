"""The drills in conf/chaos/ from the CLI: each ends SUCCEEDED, exactly, with its report and plot.

Real runs for the drills whose path is their own: controller_crash (the supervising
parent resumes the controller; its report and plot stand for every drill's) and the
soak. region_outage and double_region_loss (regions lost), spot_storm (three
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


def test_the_controller_crash_drill_runs_from_the_cli_and_ends_with_its_report(orch_home, baseline):
    before = ray_pids()
    run, r = _drill(orch_home, "controller_crash", baseline)
    assert "resuming it" in run.stderr
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
