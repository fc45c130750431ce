"""benchmarks/vs_skypilot_jobs.py's pure parts: SkyPilot's job events and our journal
turned into phases from the scancel, and the phases into the flat figures (no Slurm)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import vs_skypilot_jobs as bench
from benchmarks.common import write_json

pytestmark = pytest.mark.unit

CANCEL = 1_000_000.0


def test_event_time_reads_sqlites_naive_local_text_and_numbers() -> None:
    when = datetime.datetime(2026, 11, 30, 12, 0, 5, 250000)
    assert bench.event_time(str(when)) == pytest.approx(when.timestamp())
    assert bench.event_time(when.isoformat()) == pytest.approx(when.timestamp())
    assert bench.event_time(12.5) == 12.5
    with pytest.raises(ValueError):
        bench.event_time("yesterday")


def test_progress_times_skips_a_torn_line_and_keeps_order() -> None:
    lines = ["restored 0 10.0", "step 1 10.5", "step 2 11.0", "step 3 1", "restored 2 20.0", "step 3 21.0", "st"]
    restores, steps = bench.progress_times([*lines[:3], "step 3 11.", "garbage", *lines[4:]])
    assert restores == [(0, 10.0), (2, 20.0)]
    assert steps == [(1, 10.5), (2, 11.0), (3, 11.0), (3, 21.0)]


def progress(cancel: float) -> list[str]:
    """Trained to step 170 before the scancel, restarted from the step-150 checkpoint."""
    before = [f"step {s} {cancel - (170 - s) * 0.01:.6f}" for s in range(1, 171)]
    after = [f"restored 150 {cancel + 55.0:.6f}", f"step 151 {cancel + 58.5:.6f}", f"step 152 {cancel + 58.6:.6f}"]
    return [f"restored 0 {cancel - 5:.6f}", *before, "step 171 ", *after]


def test_their_trial_phases_from_job_events_and_progress() -> None:
    events = [
        ("PENDING", CANCEL - 200),
        ("STARTING", CANCEL - 190),
        ("RUNNING", CANCEL - 100),  # the first run: before the scancel, not the recovery's
        ("RECOVERING", CANCEL + 12.0),
        ("RUNNING", CANCEL + 50.0),
        ("SUCCEEDED", CANCEL + 90.0),
    ]
    row = bench.skypilot_trial(events, progress(CANCEL), CANCEL, CANCEL - 210, CANCEL + 95)
    assert row == {
        "detect": pytest.approx(12.0),
        "cluster_up": pytest.approx(50.0),
        "rto": pytest.approx(58.5),
        "restored_step": 150,
        "lost_steps": 20,
        "wall": pytest.approx(305.0),
        # After detection: RECOVERING to RUNNING, to the restored line, to the first step.
        "after_launch": pytest.approx(38.0),
        "after_start": pytest.approx(5.0),
        "after_restore": None,
        "after_first_step": pytest.approx(3.5),
    }


def test_their_trial_without_a_recovery_or_a_restart_says_so() -> None:
    with pytest.raises(ValueError, match="RECOVERING"):
        bench.skypilot_trial([("RUNNING", CANCEL - 10)], progress(CANCEL), CANCEL, 0.0, 1.0)
    with pytest.raises(ValueError, match="never restarted"):
        bench.skypilot_trial([("RECOVERING", CANCEL + 5)], ["restored 0 1.0"], CANCEL, 0.0, 1.0)


def test_our_trial_phases_from_the_journal_and_the_incident() -> None:
    journal: list[dict[str, Any]] = [
        {"type": "provisioned", "ts": CANCEL - 120, "purpose": "attempt"},  # the first attempt's
        {"type": "runtime.workers_ready", "ts": CANCEL - 90, "time": CANCEL - 91},  # its own
        {"type": "failure_detected", "ts": CANCEL + 2.0},
        {"type": "provisioned", "ts": CANCEL + 20.0, "purpose": "standby"},
        {"type": "provisioned", "ts": CANCEL + 30.0, "purpose": "attempt"},
        # The runtime's own time, not when the controller journaled it.
        {"type": "runtime.workers_ready", "ts": CANCEL + 39.0, "time": CANCEL + 38.0},
        {"type": "runtime.train_started", "ts": CANCEL + 43.0, "time": CANCEL + 42.5},
    ]
    incident = {"detected_at": CANCEL + 2.0, "first_step_at": CANCEL + 44.0, "restored_step": 150, "lost_steps": 7}
    row = bench.ours_trial(journal, incident, CANCEL, CANCEL - 200, CANCEL + 100)
    assert row == {
        "detect": pytest.approx(2.0),
        "cluster_up": pytest.approx(30.0),
        "rto": pytest.approx(44.0),
        "restored_step": 150,
        "lost_steps": 7,
        "wall": pytest.approx(300.0),
        "after_launch": pytest.approx(28.0),
        "after_start": pytest.approx(8.0),
        "after_restore": pytest.approx(4.5),
        "after_first_step": pytest.approx(1.5),
    }
    assert bench.ours_trial([], {"detected_at": CANCEL + 1}, CANCEL, 0.0, 1.0)["rto"] is None


def test_our_standby_trial_is_up_when_the_standby_is_activated() -> None:
    journal: list[dict[str, Any]] = [
        {"type": "provisioned", "ts": CANCEL - 120, "purpose": "attempt"},
        {"type": "provisioned", "ts": CANCEL - 60, "purpose": "standby"},
        {"type": "standby_activated", "ts": CANCEL - 500},  # not this incident's
        {"type": "failure_detected", "ts": CANCEL + 1.0},
        {"type": "standby_activated", "ts": CANCEL + 1.5},
    ]
    incident = {"detected_at": CANCEL + 1.0, "first_step_at": CANCEL + 3.0, "restored_step": 150, "lost_steps": 0}
    row = bench.ours_trial(journal, incident, CANCEL, CANCEL - 200, CANCEL + 100)
    assert (row["detect"], row["cluster_up"], row["rto"]) == pytest.approx((1.0, 1.5, 3.0))


def test_standing_by_follows_the_journals_standby_events(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    assert not bench.standing_by(journal)  # no journal yet
    lines = [{"type": "provisioned"}, {"type": "standby_ready"}]
    journal.write_text("".join(json.dumps(e) + "\n" for e in lines) + '{"type": "standby_l')
    assert bench.standing_by(journal)  # a torn last line is one being written
    journal.write_text("".join(json.dumps(e) + "\n" for e in [*lines, {"type": "standby_lost"}]))
    assert not bench.standing_by(journal)


def test_figures_are_medians_with_the_ratio_and_flat_json(tmp_path: Path) -> None:
    def row(detect: float, up: float, rto: float | None, exact: bool) -> dict[str, Any]:
        return {"detect": detect, "cluster_up": up, "rto": rto, "wall": 300.0, "lost_steps": 10, "exact": exact}

    trials = {
        "ours": [row(2, 30, 40, True), row(3, 32, 44, True), row(2, 31, None, True)],
        "skypilot": [row(10, 50, 60, True), row(20, 55, 70, False)],
    }
    fig = bench.figures({**trials, "ours_standby": [row(1, 1.5, 3, True), row(1, 1.6, 4, True)]})
    assert fig["rto_ours_standby_s"] == 3.5
    assert fig["rto_ratio_standby_vs_skypilot"] == pytest.approx(3.5 / 65, abs=1e-3)
    back = bench.figures({**trials, "ours_back": [row(1, 20, 26, True), row(1, 21, 28, True)]})
    assert back["rto_ratio_back_vs_skypilot"] == pytest.approx(27 / 65, abs=1e-3)
    assert "back into an entry used before" in bench.table(back, ("ours_back", "skypilot"))
    fig = bench.figures(trials)
    assert fig["rto_ratio_standby_vs_skypilot"] is None and fig["rto_ratio_back_vs_skypilot"] is None
    assert fig["rto_ours_s"] == 42.0 and fig["rto_skypilot_s"] == 65.0
    assert fig["rto_ratio_vs_skypilot"] == pytest.approx(42 / 65, abs=1e-3)
    assert fig["detect_ours_s"] == 2.0 and fig["detect_skypilot_s"] == 15.0
    assert fig["cluster_up_ours_s"] == 31.0 and fig["wall_skypilot_s"] == 300.0
    assert (fig["exact_weights_ours"], fig["trials_ours"]) == (3, 3)
    assert (fig["exact_weights_skypilot"], fig["trials_skypilot"]) == (1, 2)
    assert fig["rto_all_ours"] == "40.0,44.0,-"
    assert fig["after_detect_ours_s"] == 40.0 and fig["after_detect_skypilot_s"] == 50.0
    path = tmp_path / "f.json"
    write_json(str(path), fig)  # refuses anything not flat
    assert json.loads(path.read_text())["rto_ratio_vs_skypilot"] == fig["rto_ratio_vs_skypilot"]
    printed = bench.table(fig, ("ours", "skypilot"))
    assert "after detection:" in printed and "  first step" in printed
    assert "42.0s" in printed and "65.0s" in printed and "3/3" in printed and "goal <= 0.5" in printed


def test_figures_of_one_system_have_no_ratio() -> None:
    fig = bench.figures({"ours": [{"detect": 2.0, "cluster_up": 30.0, "rto": 40.0, "wall": 200.0}]})
    assert fig["rto_ratio_vs_skypilot"] is None and "rto_skypilot_s" not in fig
    assert "goal" not in bench.table(fig, ("ours",))


def test_args_defaults_and_systems() -> None:
    args = bench.parse_args([])
    assert (args.trials, args.cancel_at, args.interval, args.json, args.lock) == (4, 150, 50, None, None)
    assert args.systems == ("ours", "ours_standby", "ours_back", "skypilot")
    assert bench.parse_args(["--systems", "skypilot"]).systems == ("skypilot",)
    with pytest.raises(SystemExit):
        bench.parse_args(["--systems", "ray"])


def test_their_task_fails_over_between_the_same_two_entries(tmp_path: Path) -> None:
    task = bench.their_task("j", tmp_path, tmp_path / "ck", bench.parse_args(["--steps", "300"]))
    assert task["resources"]["any_of"] == [{"infra": "slurm/orch-slurm-a"}, {"infra": "slurm/orch-slurm-b"}]
    assert task["resources"]["job_recovery"]["strategy"] == "EAGER_NEXT_REGION"
    assert "--steps 300" in task["run"] and "--interval 50" in task["run"]


def test_the_second_cancel_waits_for_a_step_trained_there_not_one_replicated_there(tmp_path: Path) -> None:
    def commit(name: str) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "MANIFEST.json").write_text("{}")

    commit("step-300-g1")  # replicated from the first attempt
    (tmp_path / "step-400-g2").mkdir()  # not committed yet
    assert bench.newest_of_later_generation(tmp_path, 1) == 0
    commit("step-200-g2")
    assert bench.newest_of_later_generation(tmp_path, 1) == 200


def test_cancels_come_in_turn_and_stop_at_the_first_that_never_came(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    seen: list[str] = []

    def fake(ready: Any, name_has: str, stop: threading.Event, out: dict[str, Any]) -> None:
        seen.append(name_has)
        if ready():
            out.update(at=float(len(seen)), job=("1", name_has))

    monkeypatch.setattr(bench, "scancel_when", fake)
    out: dict[str, Any] = {}
    bench.scancel_in_turn([(lambda: True, "a-"), (lambda: True, "b-")], threading.Event(), out)
    assert seen == ["a-", "b-"] and out["at"] == 2.0 and [c["job"][1] for c in out["all"]] == ["a-", "b-"]
    seen.clear()
    out = {}
    bench.scancel_in_turn([(lambda: False, "a-"), (lambda: True, "b-")], threading.Event(), out)
    assert seen == ["a-"] and out == {}
