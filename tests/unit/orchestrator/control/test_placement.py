"""recovery.placement=cost in the controller: each candidate measured from the journal
and priced from the config, the first placement and a failover to the region with the
lowest expected cost to finish (not the next listed), each journaled with its table."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

import orchestrator.control.watch as watch
from orchestrator.commands.plan import cost_lines
from orchestrator.config.compose import compose
from orchestrator.control.placement import (
    capacity_for,
    home_exposure,
    measured,
    outlooks,
    ranking,
    ranking_lines,
)
from orchestrator.control.wiring import build_controller
from orchestrator.runstate.events import (
    AttemptEnded,
    AttemptStarted,
    FailureDetected,
    Provisioned,
    Replicated,
    RunStarted,
    RuntimeReport,
)
from orchestrator.runstate.journal import Journal
from tests.support.fakecloud import HEARTBEATS, FakeCloud, Script

pytestmark = pytest.mark.unit

PRICED = (
    "recovery.placement=cost",
    "cloud.regions.local-a.hourly_cost=0.2",
    "cloud.regions.local-b.hourly_cost=1.0",
    "cloud.regions.local-c.hourly_cost=0.5",
)


def cfg(tmp_path: Path, *extra: str) -> Any:
    return compose([f"home={tmp_path}", "run_id=p", "job.steps=60", *extra])


def rt(t: float, kind: str, gen: int, **fields: Any) -> RuntimeReport:
    return RuntimeReport(ts=t, kind=kind, fields={"time": t, "generation": gen, "by": "runtime", **fields})


def journal() -> list[Any]:
    """local-a provisioned in 4 s, trained steps 0-50 in 10 s, committed step 50 (1 MB) and
    replicated it to local-b, then was lost."""
    return [
        RunStarted(ts=0.0, run_id="p"),
        AttemptStarted(ts=1.0, generation=1, region="local-a"),
        Provisioned(ts=5.0, region="local-a", cluster="c1", provision_s=4.0, generation=1),
        rt(8.0, "train_started", 1, restored_step=0, restore_s=None),
        rt(18.0, "checkpoint_committed", 1, step=50, bytes=10**6, region="local-a"),
        Replicated(ts=19.0, step=50, from_="local-a", to="local-b", bytes=10**6),
        FailureDetected(ts=20.0, kind="cluster_lost", region="local-a"),
        AttemptEnded(ts=20.0, generation=1, region="local-a", last_step=50),
    ]


def test_the_journal_measures_provisioning_start_up_the_step_time_and_where_the_checkpoint_is() -> None:
    m = measured(journal())
    assert m.provision_s == {"local-a": [4.0]} and m.startup_s == [3.0]
    assert m.step_s == pytest.approx(10.0 / 50)
    assert (m.newest_step, m.newest_bytes, m.holders) == (50, 10**6, {"local-a", "local-b"})
    assert m.losses == {"local-a": 1} and m.hours["local-a"] == pytest.approx(19.0 / 3600)


def test_a_region_without_the_checkpoint_pays_its_copy_and_one_with_it_none(tmp_path: Path) -> None:
    looks = {o.region: o for o in outlooks(cfg(tmp_path, *PRICED), measured(journal()), "local-a")}
    assert looks["local-b"].checkpoint_from == "local-b" and looks["local-b"].egress_usd == 0.0
    assert looks["local-c"].checkpoint_from in ("local-a", "local-b")
    assert looks["local-c"].restore_s > looks["local-b"].restore_s  # the copy, at CROSS_REGION_MB_S
    assert looks["local-a"].rate_per_h > 0 and looks["local-c"].rate_per_h == 0  # it lost the run once
    assert {o.provision_s for o in looks.values()} == {4.0}  # measured in local-a, the guess for the rest
    assert not any(o.correlated for o in looks.values())  # local regions share no cloud's fate


def test_the_ranking_puts_the_cheapest_to_finish_first_and_prints_as_a_table(tmp_path: Path) -> None:
    table = ranking(cfg(tmp_path, *PRICED), journal(), "local-a")
    assert [s.region for s in table] == ["local-a", "local-c", "local-b"]
    lines = ranking_lines(table)
    assert lines[0].split() == ["region", "$/h", "loss/h", "setup", "hours", "$", "to", "finish", "checkpoint"]
    assert lines[1].startswith("  * local-a") and lines[3].rstrip().endswith("local-b")
    assert ranking_lines([s.as_dict() for s in table]) == lines


def _past_run(home: Path, run_id: str, region: str, hours: float, losses: int) -> None:
    """A finished run of this home: ``hours`` in ``region``, which lost it ``losses`` times."""
    path = home / "runs" / run_id / "journal.jsonl"
    path.parent.mkdir(parents=True)
    j = Journal(str(path))
    j.emit(RunStarted(run_id=run_id))
    j.emit(AttemptStarted(generation=1, region=region))
    for _ in range(losses):
        j.emit(FailureDetected(kind="preempted", region=region))
    end = j.emit(AttemptEnded(generation=1, region=region, last_step=10))
    lines = path.read_text().splitlines()
    # Back-dated: the attempt started ``hours`` before it ended.
    import json

    started = json.loads(lines[1])
    started["ts"] = end.ts - hours * 3600
    lines[1] = json.dumps(started)
    path.write_text("\n".join(lines) + "\n")


def test_the_home_s_earlier_runs_teach_a_region_s_loss_rate_and_move_the_ranking(tmp_path: Path) -> None:
    c = cfg(tmp_path, *PRICED)
    assert ranking(c, [], None)[0].region == "local-a"  # the cheapest, no losses known
    _past_run(tmp_path, "earlier-1", "local-a", hours=1.0, losses=150)
    _past_run(tmp_path, "earlier-2", "local-a", hours=1.0, losses=150)
    (tmp_path / "runs" / "broken").mkdir()
    (tmp_path / "runs" / "broken" / "journal.jsonl").write_text("not json\n")
    past = home_exposure(str(tmp_path), exclude="p")
    assert past.runs == 2 and past.losses == {"local-a": 300}
    assert home_exposure(str(tmp_path), exclude="earlier-2").runs == 1  # a run is not its own past
    assert past.hours["local-a"] == pytest.approx(2.0, rel=1e-3)
    table = ranking(c, [], None, past=past)
    assert [t.region for t in table] == ["local-c", "local-a", "local-b"]
    assert table[1].rate_per_h == pytest.approx(300 / 3, rel=1e-3)  # none declared: 300 losses in 1 + 2 hours
    lines = cost_lines(c, str(tmp_path / "runs" / "p"))
    assert lines[2].startswith("  * local-c") and lines[-1].endswith("2 earlier runs of this home")


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "POLL_S", 0.002)
    monkeypatch.setattr(watch, "HEALTH_SETTLE_S", 0.01)


def test_a_run_placed_by_cost_starts_in_the_cheapest_and_fails_over_to_the_next_cheapest(
    tmp_path: Path, fast: None
) -> None:
    config = cfg(tmp_path, *PRICED, *HEARTBEATS)
    out = io.StringIO()
    ctl = build_controller(config, FakeCloud({"local-a": [Script(30, "cluster_lost")]}), "p", out=out)  # type: ignore[arg-type]
    result = ctl.run()
    assert result["status"] == "SUCCEEDED"
    assert "failing over to local-c (placement=cost: lowest expected cost to finish, $" in out.getvalue()
    assert [a["region"] for a in result["attempt_history"]] == ["local-a", "local-c"]  # not local-b, listed next
    events = ctl.journal.events()
    (placed,) = [e for e in events if e["type"] == "placed"]
    assert placed["region"] == "local-a" and placed["placement"]["table"][0]["region"] == "local-a"
    (decision,) = [e for e in events if e["type"] == "decision"]
    assert decision["region"] == "local-c" and "placement=cost" in decision["reason"]
    table = decision["placement"]["table"]
    assert [row["region"] for row in table] == ["local-a", "local-c", "local-b"]
    assert table[1]["expected_usd"] <= table[2]["expected_usd"] and table[1]["usd_per_hour"] < table[2]["usd_per_hour"]
    assert result["goodput"]["cost_usd"]["total"] is not None


def test_a_listed_run_journals_no_placement(tmp_path: Path, fast: None) -> None:
    config = cfg(tmp_path, *HEARTBEATS)
    ctl = build_controller(config, FakeCloud({"local-a": [Script(30, "cluster_lost")]}), "p", out=io.StringIO())  # type: ignore[arg-type]
    result = ctl.run()
    assert [a["region"] for a in result["attempt_history"]] == ["local-a", "local-b"]
    events = ctl.journal.events()
    assert not [e for e in events if e["type"] == "placed"]
    assert all("placement" not in e for e in events if e["type"] == "decision")


# --- recovery.deadline_s: spot or on-demand, at each launch --------------------------------------

SPOT = ("cloud.regions.local-a.use_spot=true", "cloud.regions.local-b.use_spot=true")


def test_no_deadline_or_no_spot_region_chooses_nothing(tmp_path: Path) -> None:
    assert capacity_for(cfg(tmp_path, *SPOT), journal(), "local-a", 30.0) is None
    assert capacity_for(cfg(tmp_path, "recovery.deadline_s=100"), journal(), "local-a", 30.0) is None


def test_before_any_step_is_measured_a_deadline_run_starts_on_spot(tmp_path: Path) -> None:
    c = capacity_for(cfg(tmp_path, *SPOT, "recovery.deadline_s=100"), journal()[:3], "local-a", 6.0)
    assert c is not None and c.spot and "no step measured yet" in c.reason


def test_a_slack_that_would_not_absorb_one_more_loss_goes_on_demand(tmp_path: Path) -> None:
    # 0.2 s a step: 60 steps are 12 s of work, 50 done; a restart measured 4 + 3 s; interval 4 s.
    greedy = (*SPOT, "recovery.deadline_policy=greedy", "checkpoint.interval_steps=20")
    roomy = capacity_for(cfg(tmp_path, *greedy, "recovery.deadline_s=100"), journal(), "local-b", 20.0)
    assert roomy is not None and roomy.spot and roomy.slack_s == pytest.approx(100 - 20 - 2)
    assert roomy.needed_s == pytest.approx(2 * (4 + 3) + 4)
    tight = capacity_for(cfg(tmp_path, *greedy, "recovery.deadline_s=30"), journal(), "local-b", 20.0)
    assert tight is not None and not tight.spot and "would not absorb another loss" in tight.reason


def test_uniform_progress_goes_on_demand_while_behind_its_line(tmp_path: Path) -> None:
    # 60 s of work, 10 s done; a 200 s deadline, a 7 s restart: the line is at 4 s by 20 s
    # (ahead of it: spot, with 130 s of slack), at 10.3 s by 40 s (behind: on-demand).
    up = (*SPOT, "recovery.deadline_policy=uniform_progress", "recovery.deadline_s=200", "job.steps=300")
    ahead = capacity_for(cfg(tmp_path, *up, "checkpoint.interval_steps=20"), journal(), "local-b", 20.0)
    assert ahead is not None and ahead.spot
    c = capacity_for(cfg(tmp_path, *up, "checkpoint.interval_steps=20"), journal(), "local-b", 40.0)
    assert c is not None and not c.spot and c.reason.startswith("behind uniform progress: 10 s of 60 s"), c


def test_a_deadline_run_preempted_on_spot_goes_on_demand_and_no_preemption_strikes_it_there(
    tmp_path: Path, fast: None
) -> None:
    config = cfg(
        tmp_path,
        *SPOT,
        "recovery.deadline_s=0.01",
        *HEARTBEATS,
    )
    cloud = FakeCloud({"local-a": [Script(30, "preempted")]})
    ctl = build_controller(config, cloud, "p", out=io.StringIO())  # type: ignore[arg-type]
    result = ctl.run()
    assert result["status"] == "SUCCEEDED"
    chosen = [e for e in ctl.journal.events() if e["type"] == "capacity"]
    assert [(c["generation"], c["spot"]) for c in chosen] == [(1, True), (2, False)], chosen
    assert "would not absorb another loss" in chosen[1]["reason"] or "behind uniform progress" in chosen[1]["reason"]
    assert [rt.spec.on_demand for rt in cloud.runtimes] == [False, True]
