"""The incident report from a run's files: timeline rows, totals, the plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.commands.report import (
    build,
    failed_by_user_code,
    figure,
    region_colours,
    render,
    search_figure,
    user_error_lines,
    write,
)
from orchestrator.runstate.losses import append_loss
from orchestrator.runstate.runfiles import DamagedFile


def _journal(run_dir: Path, events: list[dict]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def _ended(ts: float, gen: int, region: str, restored: int, last: int) -> dict:
    return {
        "ts": ts,
        "type": "attempt_ended",
        "generation": gen,
        "region": region,
        "restored_step": restored,
        "last_step": last,
    }


def _events() -> list[dict]:
    return [
        {"ts": 100.0, "type": "run_started", "run_id": "r1"},
        {"ts": 110.0, "type": "fault_injected", "kind": "kill_region", "step": 60, "index": 0},
        {"ts": 110.2, "type": "decision", "action": "failover", "region": "local-b", "failure": "cluster_lost"},
        {
            "ts": 126.0,
            "type": "incident",
            "kind": "cluster_lost",
            "from_region": "local-a",
            "to_region": "local-b",
            "failed_at": 110.0,
            "detected_at": 110.2,
            "last_step": 60,
            "restored_step": 50,
            "first_step_at": 125.0,
            "generation": 1,
            "detected_after_s": 0.2,
            "lost_steps": 10,
            "rto_s": 15.0,
        },
        {
            "ts": 111.0,
            "type": "attempt_ended",
            "generation": 1,
            "region": "local-a",
            "restored_step": 0,
            "last_step": 60,
        },
        {
            "ts": 130.0,
            "type": "attempt_ended",
            "generation": 2,
            "region": "local-b",
            "restored_step": 50,
            "last_step": 500,
        },
        {"ts": 130.1, "type": "transition", "from": "RUNNING", "to": "SUCCEEDED"},
    ]


def test_rows_and_totals_name_the_fault_decision_and_loss(tmp_path: Path) -> None:
    _journal(tmp_path, _events())
    rep = build(str(tmp_path))
    assert rep is not None and rep.status == "SUCCEEDED"
    (row,) = rep.rows
    assert (row.fault, row.failure, row.decision) == ("kill_region (step 60)", "cluster_lost", "failover")
    assert (row.from_region, row.to_region, row.restored_step, row.lost_steps, row.rto_s) == (
        "local-a",
        "local-b",
        50,
        10,
        15.0,
    )
    assert rep.totals["lost_steps"] == 10 and rep.totals["max_rto_s"] == 15.0 and rep.totals["attempts"] == 2
    text = render(rep)
    assert "kill_region (step 60)" in text and "local-a -> local-b" in text and "10 steps lost" in text


def test_write_makes_the_text_and_a_png(tmp_path: Path) -> None:
    _journal(tmp_path, _events())
    for step in range(5, 501, 5):
        append_loss(
            str(tmp_path),
            generation=1 if step <= 60 else 2,
            region="local-a" if step <= 60 else "local-b",
            step=step,
            loss=2.0 / step,
        )
    done = write(str(tmp_path))
    assert done is not None
    text, png = done
    assert (tmp_path / "report.txt").read_text().strip() == text
    assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_journal_no_report(tmp_path: Path) -> None:
    assert build(str(tmp_path)) is None


def test_the_world_size_over_steps_gets_its_own_panel_where_it_changed(tmp_path: Path) -> None:
    def started(ts: float, gen: int, restored: int, world: int) -> dict:
        return {
            "ts": ts,
            "type": "runtime.train_started",
            "by": "runtime",
            "generation": gen,
            "region": "local-a",
            "restored_step": restored,
            "world_size": world,
            "workers": 2,
        }

    events = [*_events(), started(101.0, 1, 0, 2), started(112.0, 1, 40, 1), started(125.0, 2, 50, 1)]
    _journal(tmp_path, events)
    rep = build(str(tmp_path))
    assert rep is not None and rep.worlds == [(0, 2), (40, 1), (50, 1)]
    _, path = write(str(tmp_path))
    assert Path(path).stat().st_size > 0
    # A run whose world never changed keeps the two panels (and no series is made up).
    _journal(tmp_path, [*_events(), started(101.0, 1, 0, 2)])
    rep = build(str(tmp_path))
    assert rep is not None and rep.worlds == [(0, 2)]


def _search_events() -> list[dict]:
    config = {"hpo": {"enabled": True, "metric": "accuracy"}}

    def result(trial: str, it: int, value: float) -> dict:
        metrics = {"accuracy": value, "eval_loss": 1.0}
        return {
            "ts": 101.0 + it,
            "type": "runtime.trial_result",
            "generation": 1,
            "by": "runtime",
            "trial_id": trial,
            "iteration": it,
            "metrics": metrics,
        }

    return [
        {"ts": 100.0, "type": "run_started", "run_id": "s1", "config": config},
        result("trial_00000", 1, 0.2),
        result("trial_00001", 1, 0.1),
        result("trial_00000", 2, 0.4),
        result("trial_00000", 2, 0.45),  # reported again after a restore: the last counts
        {**result("trial_00000", 3, 0.99), "by": "zombie"},
        _ended(120.0, 1, "local-a", 0, 5),
    ]


def test_a_search_report_plots_each_trials_metric_by_iteration(tmp_path: Path) -> None:
    _journal(tmp_path, _search_events())
    rep = build(str(tmp_path))
    assert rep is not None and rep.search_metric == "accuracy"
    assert rep.search == {"trial_00000": [(1, 0.2), (2, 0.45)], "trial_00001": [(1, 0.1)]}
    done = write(str(tmp_path))
    assert done is not None and Path(done[1]).stat().st_size > 10_000


def test_the_junit_report_is_a_suite_ci_reads_with_a_failure_per_missed_objective(tmp_path: Path) -> None:
    from xml.etree import ElementTree as ET

    from orchestrator.commands.report import junit_xml

    _journal(tmp_path, _events())
    rep = build(str(tmp_path))
    assert rep is not None
    rep.result = {
        "duration_s": 40.0,
        "objectives": {
            "met": False,
            "checked": [
                {"objective": "max_rto_s", "limit": 5.0, "measured": 15.0, "met": False},
                {"objective": "exact", "limit": "base", "measured": None, "met": False, "why": "no run <&>"},
                {"objective": "max_lost_steps", "limit": 10, "measured": 10, "met": True},
            ],
        },
    }
    root = ET.fromstring(junit_xml(rep))
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "orchestrator.r1" and (suite.get("tests"), suite.get("failures")) == ("5", "2")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == [
        "run",
        "incident 1: cluster_lost local-a -> local-b",
        "objective max_rto_s 5.0",
        "objective exact base",
        "objective max_lost_steps 10",
    ]
    assert cases["run"].find("failure") is None  # it SUCCEEDED
    assert cases["incident 1: cluster_lost local-a -> local-b"].get("time") == "15.0"
    assert cases["objective max_rto_s 5.0"].find("failure").get("message") == "measured 15.0"  # type: ignore[union-attr]
    assert "no run <&>" in cases["objective exact base"].find("failure").text  # type: ignore[operator, union-attr]


def test_junit_is_a_file_here_and_only_action_report_takes_it() -> None:
    import pytest

    from orchestrator.config.compose import compose
    from orchestrator.errors import ConfigError

    assert compose(["action=report", "run_id=r1", "junit=out.xml"]).junit == "out.xml"
    for overrides, words in (
        (["action=status", "run_id=r1", "junit=out.xml"], "only action=report takes it"),
        (["action=report", "run_id=r1", "junit=s3://b/out.xml"], "not a URL"),
    ):
        with pytest.raises(ConfigError) as err:
            compose(overrides)
        assert err.value.key == "junit" and words in str(err.value)


def test_a_link_planted_as_the_report_is_replaced_never_written_through(tmp_path: Path) -> None:
    _journal(tmp_path, _events())
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("theirs\n")
    (tmp_path / "report.txt").symlink_to(theirs)
    (tmp_path / "report.png").symlink_to(tmp_path / "made-through-the-link")
    assert write(str(tmp_path)) is not None
    assert theirs.read_text() == "theirs\n" and not (tmp_path / "made-through-the-link").exists()
    assert not (tmp_path / "report.txt").is_symlink() and not (tmp_path / "report.png").is_symlink()


def test_a_damaged_loss_series_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    _journal(tmp_path, _events())
    (tmp_path / "loss.jsonl").write_bytes(b"[" * 100_000 + b"\n")
    with pytest.raises(DamagedFile, match=r"loss\.jsonl"):
        write(str(tmp_path))
    assert not (tmp_path / "report.txt").exists() and not (tmp_path / "report.png").exists()


SITE = "/home/me/proj/buggy_workload.py:27"


def _user_error_events(error: str = "ValueError: loss exploded in step 5") -> list[dict]:
    """A run the workload's own code failed: one restart in place, the same error again, given up."""

    def raised(ts: float, gen: int) -> dict:
        return {
            "ts": ts,
            "type": "runtime.user_error",
            "by": "runtime",
            "generation": gen,
            "rank": 0,
            "error": error,
            "traceback": "Traceback (most recent call last):\n  ...\nValueError: loss exploded in step 5\n",
            "step": 5,
            "site": SITE,
        }

    return [
        {"ts": 100.0, "type": "run_started", "run_id": "u1"},
        {"ts": 100.1, "type": "transition", "from": "PENDING", "to": "PROVISIONING"},
        {"ts": 100.2, "type": "attempt_started", "generation": 1, "region": "local-a"},
        {"ts": 101.0, "type": "transition", "from": "PROVISIONING", "to": "RUNNING"},
        raised(104.0, 1),
        {"ts": 104.5, "type": "decision", "action": "restart_in_place", "region": "local-a", "failure": "user_error"},
        _ended(104.6, 1, "local-a", 0, 5),
        {"ts": 104.7, "type": "attempt_started", "generation": 2, "region": "local-a"},
        raised(108.0, 2),
        {"ts": 108.5, "type": "decision", "action": "give_up", "region": "local-a", "failure": "user_error"},
        _ended(108.6, 2, "local-a", 4, 5),
        {"ts": 108.7, "type": "transition", "from": "RUNNING", "to": "FAILED", "reason": "user error twice"},
    ]


def _texts(fig: object) -> str:
    """Every text the figure draws (titles, labels, annotations), one string to search."""
    texts = [t.get_text() for t in fig.texts]  # type: ignore[attr-defined]
    for ax in fig.axes:  # type: ignore[attr-defined]
        texts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), *(t.get_text() for t in ax.texts)]
    return "\n".join(texts)


def test_a_user_errors_plot_names_the_error_its_step_and_file_line_with_no_loss_plotted(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    _journal(tmp_path, _user_error_events())
    rep = build(str(tmp_path))
    assert rep is not None
    assert rep.user_error == {"error": "ValueError: loss exploded in step 5", "step": 5, "site": SITE}
    fig = figure(rep, [])
    try:
        text = _texts(fig)
        assert "ValueError: loss exploded in step 5" in text
        assert "in step 5" in text and f"at {SITE}" in text
        # The step axis reaches the failing step, and the failure is marked there.
        ax = fig.axes[0]
        lo, hi = ax.get_xlim()
        assert lo == 0 and hi >= 5
        assert any(list(line.get_xdata()) == [5, 5] for line in ax.get_lines())
    finally:
        plt.close(fig)
    # result.json, once written, is the word on how the run ended.
    result = {"status": "FAILED", "user_error": {"error": "E: x", "step": 3, "site": None}}
    assert failed_by_user_code(result, rep.user_error) == result["user_error"]
    assert failed_by_user_code({**result, "status": "SUCCEEDED"}, rep.user_error) is None


def test_a_long_error_is_cut_to_fit_and_a_long_path_keeps_its_file_and_line() -> None:
    site = "/very/deep" * 20 + "/buggy_workload.py:27"
    lines = user_error_lines({"error": "RuntimeError: " + "x" * 500 + "$a$\x1b[2J", "step": 0, "site": site}, width=60)
    assert len(lines[0]) == 60 and lines[0].startswith("RuntimeError: xxx") and lines[0].endswith("…")
    assert lines[1] == "before the first step (step 0)"
    assert lines[2].endswith("/buggy_workload.py:27") and len(lines[2]) == len("at ") + 60
    assert user_error_lines({"error": "E: \x1b[2J"})[0] == "E: \\x1b[2J"  # shown, not obeyed
    assert user_error_lines({"error": "E"})[1] == "step ?"


def test_the_user_error_is_marked_after_the_loss_it_ended(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    _journal(tmp_path, _user_error_events())
    rep = build(str(tmp_path))
    assert rep is not None
    points = [{"generation": 1, "region": "local-a", "step": s, "loss": 1.0 / s} for s in (1, 2, 3, 4)]
    fig = figure(rep, points)
    try:
        ax = fig.axes[0]
        assert ax.get_xlim()[1] >= 5
        assert "in step 5" in _texts(fig)
    finally:
        plt.close(fig)
    done = write(str(tmp_path), rep)
    assert done is not None and "ValueError: loss exploded" in (tmp_path / "report.txt").read_text()


def test_each_region_has_its_own_colour_in_a_search_report_too(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    colours = region_colours(["local-b", "local-a", "local-c", "local-a"])
    assert list(colours) == ["local-a", "local-b", "local-c"] and len(set(colours.values())) == 3
    events = [*_search_events(), _ended(130.0, 2, "local-b", 5, 9)]
    _journal(tmp_path, events)
    rep = build(str(tmp_path))
    assert rep is not None and rep.search
    fig = search_figure(rep)
    try:
        band = fig.axes[1]
        bars = {to_hex(c.get_facecolor()[0]) for c in band.collections}
        assert len(bars) == 2, bars
    finally:
        plt.close(fig)


def test_the_report_says_and_draws_where_the_time_went(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    _journal(tmp_path, _user_error_events())
    rep = build(str(tmp_path))
    assert rep is not None and rep.goodput is not None
    text = render(rep)
    assert "  goodput    " in text and " of " in text
    fig = figure(rep, [])
    try:
        (bar,) = [ax for ax in fig.axes if ax.get_title().startswith("where the time went: goodput")]
        assert bar.patches, "a segment per category"
        assert sum(p.get_width() for p in bar.patches) == pytest.approx(rep.goodput["wall_s"], rel=1e-3)
    finally:
        plt.close(fig)
