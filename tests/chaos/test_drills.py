"""Every drill in conf/chaos/ from the CLI: it ends SUCCEEDED, exactly, with its report and plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from invariants import nothing_left, survived
from support import REPO, orchestrate, ray_pids

DRILLS = sorted(p.stem for p in (REPO / "conf" / "chaos").glob("*.yaml") if p.stem not in ("none", "soak"))


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
    if name == "region_outage":
        (inc,) = r["incidents"]
        assert (inc["kind"], inc["from_region"], inc["to_region"]) == ("cluster_lost", "local-a", "local-b")
        assert inc["restored_step"] == 50 and inc["lost_steps"] == 10
        assert 0 <= inc["detected_after_s"] < 5 and inc["rto_s"] >= inc["detected_after_s"]
    elif name == "spot_storm":
        assert [i["kind"] for i in r["incidents"]] == ["preempted"] * 3
        assert all(i["lost_steps"] == 0 for i in r["incidents"])
    elif name == "double_region_loss":
        assert r["region"] == "local-c"
        assert [i["to_region"] for i in r["incidents"]] == ["local-b", "local-c"]
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
