"""The drills in conf/chaos/ from the CLI: each ends SUCCEEDED, exactly, with its report and plot.

Real runs for the drills whose path is their own: controller_crash (the supervising
parent resumes the controller), double_region_loss (whose first fault is region_outage's,
so region_outage's incident is checked on it) and the soak. spot_storm (three
preemptions) and worker_loss (a killed worker) run the same faults as the invariant
matrix's preempt and kill_worker rows (test_matrix.py); their configs are checked in
tests/unit/test_drill_configs.py. Each real run costs minutes on a 2-core machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from invariants import nothing_left, survived
from support import orchestrate, ray_pids

DRILLS = ("controller_crash", "double_region_loss")


def _drill(home: Path, name: str, baseline):
    run = orchestrate(home, f"drill-{name}", f"chaos={name}", timeout=900)
    r = survived(run, baseline)
    assert "incident report" in run.stdout
    assert (run.run_dir / "report.png").stat().st_size > 10_000
    assert r["incidents"], "a drill without an incident drilled nothing"
    return run, r


@pytest.mark.parametrize("name", DRILLS)
def test_drill_runs_from_the_cli_and_ends_with_its_report(name, orch_home, baseline):
    before = ray_pids()
    run, r = _drill(orch_home, name, baseline)
    if name == "double_region_loss":
        assert r["region"] == "local-c"
        assert [i["to_region"] for i in r["incidents"]] == ["local-b", "local-c"]
        # Its first fault is region_outage's (kill_region at step 60): that drill's incident.
        inc = r["incidents"][0]
        assert (inc["kind"], inc["from_region"], inc["to_region"]) == ("cluster_lost", "local-a", "local-b")
        assert inc["restored_step"] == 50 and inc["lost_steps"] == 10
        assert 0 <= inc["detected_after_s"] < 5 and inc["rto_s"] >= inc["detected_after_s"]
    elif name == "controller_crash":
        assert "resuming it" in run.stderr
        assert [i["kind"] for i in r["incidents"]] == ["controller_lost"]
    nothing_left(before, orch_home)


@pytest.mark.soak
def test_seeded_soak_of_twenty_random_faults_ends_exactly(orch_home, baseline):
    before = ray_pids()
    run, _r = _drill(orch_home, "soak", baseline)
    injected = run.events("fault_injected")
    assert len(injected) >= 20, [e["kind"] for e in injected]
    assert {e["kind"] for e in injected} >= {"kill_worker", "preempt", "kill_region", "corrupt_checkpoint"}
    nothing_left(before, orch_home)
