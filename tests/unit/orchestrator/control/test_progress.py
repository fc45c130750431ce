"""The terminal's view of a run: start-up status lines, a progress line that fits the
terminal and never comes back stale."""

from __future__ import annotations

import io

import pytest

from orchestrator.control import progress
from orchestrator.control.progress import ProgressLine, eta_text, line_text, startup_text
from orchestrator.runstate.events import (
    AttemptStarted,
    DecisionMade,
    FailureDetected,
    Fence,
    Provisioned,
    ProvisionRetry,
    RestoreCopied,
    RuntimeReport,
    RuntimeStarted,
)

TELEMETRY = {
    "workers": [
        {
            "rank": 0,
            "cpu_percent": 90.0,
            "peak_rss_bytes": 500_000_000,
            "net_bytes_sent": 4_000_000,
            "net_bytes_recv": 2_000_000,
            "samples_per_s": 1000.0,
        }
    ],
    "gpu": None,
}
PROG = {
    "step": 120,
    "total": 500,
    "steps_per_s": 20.0,
    "loss": 0.25,
    "last_checkpoint": "file:///h/stores/a/r/checkpoints/step-100/",
    "telemetry": TELEMETRY,
}


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("step", "total", "rate", "text"),
    [
        (120, 500, 20.0, "ETA 0:19"),
        (0, 100_000, 10.0, "ETA 2:46:40"),
        (500, 500, 20.0, ""),
        (10, 500, 0.0, ""),
        (10, "?", 5.0, ""),
    ],
)
def test_eta_is_time_left_at_the_current_rate(step: int, total: object, rate: float, text: str) -> None:
    assert eta_text(step, total, rate) == text


def test_the_line_fits_the_terminal_dropping_the_least_useful_parts_first() -> None:
    full = line_text("local-a", 2, PROG, 0.12, None)
    assert len(full) > 120
    for part in ("step 120/500", "ETA 0:19", "loss 0.2500", "ckpt step-100", "repl lag 0.12s", "1w cpu 90%"):
        assert part in full
    at_120 = line_text("local-a", 2, PROG, 0.12, 119)
    assert len(at_120) <= 119 and "1w cpu" not in at_120 and "repl lag" in at_120
    at_80 = line_text("local-a", 2, PROG, 0.12, 79)
    assert len(at_80) <= 79
    assert at_80.startswith("[local-a g2] step 120/500") and "ETA 0:19" in at_80 and "repl lag" not in at_80
    tiny = line_text("local-a", 2, PROG, 0.12, 20)
    assert len(tiny) == 20 and tiny.startswith("[local-a g2]")


def test_every_start_up_phase_has_its_line() -> None:
    lines = [
        startup_text(AttemptStarted(generation=2, region="local-b")),
        startup_text(AttemptStarted(generation=3, region="local-c", standby=True)),
        startup_text(ProvisionRetry(region="local-b", error="no capacity", retry=1)),
        startup_text(Provisioned(region="local-b", cluster="r-local-b-g2", provision_s=6.04)),
        startup_text(RestoreCopied(step=150, from_="local-a", to="local-b")),
        startup_text(Fence(generation=2, restored_step=150)),
        startup_text(Fence(generation=2, restored_step=160, moved_from=150)),
        startup_text(RuntimeStarted(pid=7, generation=2)),
        startup_text(RuntimeReport(kind="driver_connected", fields={})),
        startup_text(RuntimeReport(kind="workers_started", fields={})),
        startup_text(RuntimeReport(kind="train_started", fields={"restored_step": 150})),
        startup_text(RuntimeReport(kind="train_started", fields={"restored_step": 0})),
    ]
    assert lines == [
        "attempt 2 in local-b: provisioning a cluster",
        "attempt 3 in local-c: activating the warm standby",
        "provisioning in local-b failed (no capacity); retry 1",
        "cluster r-local-b-g2 up in 6.0s; starting the runtime",
        "restoring step 150: copied from local-a's store to local-b's",
        "newest checkpoint that verifies: step 150; this attempt restores it",
        "the lost attempt committed step 160 after the scan found step 150; this attempt restores it",
        "runtime started; connecting to Ray",
        "connected to Ray; starting the workers",
        "workers started; loading data and the checkpoint",
        "training from step 150",
        "training from step 0",
    ]
    # A standby's cluster and runtime are not the run's start-up; a fresh run has no restore.
    assert startup_text(Provisioned(region="local-c", cluster="s", purpose="standby")) is None
    assert startup_text(RuntimeStarted(pid=7, generation=3, standby=True)) is None
    assert startup_text(Fence(generation=1, restored_step=0)) is None
    assert startup_text(RuntimeReport(kind="heartbeat", fields={})) is None


def test_status_lines_carry_the_time_since_the_attempt_began() -> None:
    out = io.StringIO()
    line = ProgressLine(out)
    line.event(AttemptStarted(generation=1, region="local-a"))
    line.event(RuntimeStarted(pid=7, generation=1))
    first, second = out.getvalue().splitlines()
    assert first == "-- attempt 1 in local-a: provisioning a cluster"
    assert second.startswith("-- runtime started; connecting to Ray  (+") and second.endswith("s)")


def test_a_live_line_is_redrawn_under_a_note_and_a_stale_one_never() -> None:
    out = Tty()
    line = ProgressLine(out)
    line.update("local-a", 1, PROG)
    line.note("chaos: kill_worker at step 120")
    live = out.getvalue()
    assert live.endswith("-- chaos: kill_worker at step 120\n" + line_text("local-a", 1, PROG, None, line.width()))

    # The attempt failed: its line belongs to the past, whatever comes next.
    line.event(FailureDetected(kind="cluster_lost", region="local-a"))
    line.note("failure in local-a: cluster_lost")
    line.event(DecisionMade(action="failover", region="local-b", failure="cluster_lost"))
    line.event(AttemptStarted(generation=2, region="local-b"))
    after = out.getvalue()[len(live) :]
    assert "step 120/500" not in after
    assert after.endswith("-- attempt 2 in local-b: provisioning a cluster\n")


def test_a_line_left_alone_goes_stale_by_time(monkeypatch: pytest.MonkeyPatch) -> None:
    out = Tty()
    line = ProgressLine(out)
    line.update("local-a", 1, PROG)
    now = progress.time.time()
    monkeypatch.setattr(progress.time, "time", lambda: now + progress.STALE_S + 1)
    line.note("store of local-a failing: committing to local-b's store")
    assert out.getvalue().endswith("committing to local-b's store\n")


def test_off_means_silent() -> None:
    out = Tty()
    line = ProgressLine(out, enabled=False)
    line.event(AttemptStarted(generation=1, region="local-a"))
    line.update("local-a", 1, PROG)
    line.note("x")
    line.close()
    assert out.getvalue() == ""


def test_the_line_shows_the_world_and_the_nodes_where_they_can_change() -> None:
    from orchestrator.control.progress import world_text

    assert world_text({"world_size": 2, "workers": 2}) == ""
    assert world_text({"world_size": 1, "workers": 2}) == "  1/2 workers"
    assert world_text({"world_size": 2, "workers": 2, "nodes": "2/2"}) == "  2/2 workers, 2/2 nodes"
    assert world_text({"workers": 2, "nodes": "1/2"}) == "  1/2 nodes"


def test_a_train_functions_line_counts_its_reports_with_no_total_or_eta_unless_declared() -> None:
    # job.steps is the built-in loop's: a function that declares nothing has no total.
    metrics = {"epoch": 7, "acc": 0.91234, "loss": 0.5}
    prog = {"step": 8, "reports": 8, "steps_per_s": 2.0, "loss": 0.5, "metrics": metrics}
    text = line_text("local-a", 1, prog, None, None)
    assert text.startswith("[local-a g1] report 8  ") and "reports/s" in text
    assert "ETA" not in text and "/500" not in text and "epoch 7  acc 0.9123" in text
    declared = line_text("local-a", 1, {**prog, "total": 10}, None, None)
    assert "report 8/10" in declared and "ETA 0:01" in declared


def test_the_built_in_loop_and_a_search_count_steps_of_their_total() -> None:
    assert progress.counted({"step": 32, "total": 42, "trials": {"RUNNING": 2}}) == ("step", 32, 42)
    assert progress.counted({"step": 5}) == ("step", 5, None)
