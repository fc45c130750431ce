"""A run's figures as SVG: the report's loss figure and the timeline, text kept as text."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from orchestrator.commands import report
from orchestrator.console.plots import loss_svg, message_svg, timeline_svg
from orchestrator.runstate import events as E
from orchestrator.runstate.journal import read_typed
from orchestrator.runstate.losses import read_loss
from tests.support.console_runs import make_run

pytestmark = pytest.mark.unit


def test_a_failovers_figures(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "r", "failover", t0=time.time() - 200)
    loss = loss_svg(report.build(str(run_dir)), read_loss(str(run_dir)))
    assert loss.startswith(b"<?xml") and b"<svg" in loss and b"training loss" in loss
    # The log axis's labels drawn as math (10 with its exponent), not as their source (kept in comments).
    assert not re.search(rb"<text[^>]*>[^<]*mathdefault", loss)
    line = timeline_svg(read_typed(str(run_dir / "journal.jsonl")), time.time(), live=False)
    assert b"local-a" in line and b"local-b" in line and b"restore 50" in line and b"kill_region" in line


def test_no_series_no_journal_no_attempt_each_say_so() -> None:
    rep = report.Report(run_id="r", status="RUNNING")
    assert b"no loss series yet" in loss_svg(rep, [])
    assert b"no journal yet" in loss_svg(None, []) and b"no journal yet" in timeline_svg([], 0.0, live=True)
    started = [E.RunStarted(ts=1.0, run_id="r")]
    assert b"no attempt started yet" in timeline_svg(started, 2.0, live=True)
    assert b"&lt;b&gt;" in message_svg("<b>")


def test_markup_and_math_in_a_journal_are_drawn_as_text() -> None:
    events = [
        E.RunStarted(ts=1.0, run_id="r"),
        E.AttemptStarted(ts=2.0, generation=1, region="<script>alert(1)</script>"),
        E.FaultInjected(ts=3.0, kind="$\\frac{1}{0}$", step=1),
        E.AttemptStarted(ts=4.0, generation=2, region="$x^$"),
    ]
    svg = timeline_svg(events, 10.0, live=True)
    assert b"<script" not in svg and b"&lt;script&gt;" in svg and b"$x^$" in svg


def test_a_run_named_like_math_draws_its_loss_figure_literally(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "r", "failover", t0=time.time() - 200)
    rep = report.build(str(run_dir))
    assert rep is not None
    rep.run_id = "run$\\frac{"  # no valid mathtext: drawn as math it would raise
    points = [{**p, "region": "$\\x$"} for p in read_loss(str(run_dir))]
    svg = loss_svg(rep, points)
    assert b"run$" in svg and b"could not be drawn" not in svg
