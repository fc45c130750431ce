"""action=watch: following a journal as it grows, and ending as the foreground run would."""

from __future__ import annotations

import io
import json
import os
import signal
from pathlib import Path

import pytest

from orchestrator.chaos.injector import Injected
from orchestrator.commands import watch
from orchestrator.commands.watch import JournalTail, event_line
from orchestrator.control.progress import chaos_text, node_lost_text
from orchestrator.runstate import rundir
from orchestrator.runstate.events import (
    AttemptStarted,
    DecisionMade,
    FailureDetected,
    HealthGlitch,
    NodeLost,
    NodeReplaced,
    NodeReplaceFailed,
    RunStarted,
    RuntimeReport,
)
from orchestrator.runstate.journal import DamagedFile, Journal
from orchestrator.runstate.rundir import lock_controller
from recovery.detection import FailureKind
from recovery.policy import Action

RESULT = {"status": "SUCCEEDED", "final_step": 5, "final_checkpoint": None, "metrics": {}, "incidents": [],
          "attempts": 1, "duration_s": 1.0, "weights_sha256": None}  # fmt: skip


def _run(tmp_path: Path) -> tuple[str, str, Journal]:
    home = str(tmp_path / "home")
    run_dir = rundir.run_path(home, "r1")
    j = Journal(rundir.journal_path(run_dir))
    j.emit(RunStarted(run_id="r1", config={"job": {"name": "digits", "steps": 5}}))
    return home, run_dir, j


def test_the_tail_gives_each_whole_line_once_and_waits_for_a_line_being_written(tmp_path: Path) -> None:
    _home, run_dir, j = _run(tmp_path)
    path = rundir.journal_path(run_dir)
    tail = JournalTail(path)
    assert [type(e) for e in tail.read()] == [RunStarted]
    assert tail.read() == []
    j.emit(AttemptStarted(generation=1, region="local-a"))
    whole = Path(path).read_bytes()
    line = whole.splitlines(keepends=True)[-1]
    Path(path).write_bytes(whole[: -len(line)] + line[:10])  # the same line, still being written
    tail = JournalTail(path)
    assert [type(e) for e in tail.read()] == [RunStarted]
    with open(path, "ab") as fh:
        fh.write(line[10:])
    (ev,) = tail.read()
    assert isinstance(ev, AttemptStarted) and ev.region == "local-a"


def test_a_torn_line_is_skipped_and_a_line_that_is_no_event_is_damage(tmp_path: Path) -> None:
    _home, run_dir, _j = _run(tmp_path)
    path = rundir.journal_path(run_dir)
    with open(path, "ab") as fh:
        fh.write(b'{"type": "attempt_sta\n')
    assert [type(e) for e in JournalTail(path).read()] == [RunStarted]
    with open(path, "ab") as fh:
        fh.write(b'{"type": "attempt_started", "ts": 1, "generation": "one", "region": "a"}\n')
    with pytest.raises(DamagedFile):
        JournalTail(path).read()


def test_failures_and_decisions_have_the_foreground_runs_lines() -> None:
    failed = FailureDetected(kind="cluster_lost", region="local-a", detail="no heartbeat")
    assert event_line(failed) == "failure in local-a: cluster_lost (no heartbeat)"
    decided = DecisionMade(action=Action.FAILOVER, failure=FailureKind.CLUSTER_LOST, region="local-b")
    assert event_line(decided) == "failing over to local-b"
    assert event_line(AttemptStarted(generation=1, region="local-a")) is None


def test_a_drill_has_the_foreground_runs_chaos_line_read_back_from_the_journal(tmp_path: Path) -> None:
    home, run_dir, j = _run(tmp_path)
    j.emit(AttemptStarted(generation=1, region="local-a"))
    # What the controller does for a drill: journal the fault, and print its chaos line.
    drill = Injected(1, "kill_region", 2591, 0.0, {"trigger": "drill", "region": "local-a", "killed": 9})
    j.emit(drill.event())
    foreground = chaos_text(drill.kind, drill.step, drill.detail)
    assert foreground == "chaos: kill_region at step 2591 (drill)"
    assert [event_line(ev) for ev in JournalTail(rundir.journal_path(run_dir)).read()][-1] == foreground
    Path(rundir.result_path(run_dir)).write_text(json.dumps(RESULT))
    out = io.StringIO()
    assert watch.main(home, "r1", out=out, poll_s=0.01) == 0
    assert f"-- {foreground}\n" in out.getvalue(), out.getvalue()


def test_node_health_and_store_events_have_the_foreground_runs_lines() -> None:
    config = {"recovery": {"node_replace_timeout_s": 30.0}, "trainer": {"workers": 2}, "cloud": {"regions": {"b": {}}}}
    lost = NodeLost("a", 1, 2, "gone", fits=2, world_size=2, replacing=True, held_workers=True)
    # As nodewatch says it: the nodes left fit the group (2 >= 2 workers), which goes on at once.
    said = node_lost_text(2, "a", "gone", replacing=True, held=True, wait_s=30.0, goes_on=True)
    assert (
        event_line(lost, config)
        == said
        == ("node 2 of a lost (gone): replacing it (up to 30s); the group goes on at once on the nodes left")
    )
    idle = NodeLost("a", 1, 3, "gone", fits=1, replacing=False, held_workers=False)
    assert event_line(idle, config) == (
        "node 3 of a lost (gone): not replaced (recovery.node_replace_timeout_s=0); it ran no worker: training goes on"
    )
    assert event_line(NodeReplaced("a", 1, 2, 4.25)) == "node 2 of a replaced in 4.2s"
    assert event_line(NodeReplaceFailed("a", 1, 2, "no capacity")) == "node 2 of a not replaced: no capacity"
    glitch = HealthGlitch(region="a", generation=1, health="not_up", detail="timeout", failed_checks=1)
    assert event_line(glitch) == "health check of a not UP (timeout); heartbeats fresh: going on"
    assert event_line(HealthGlitch(region="a", generation=1, health="not_up", failed_checks=2)) is None  # said once
    fallback = RuntimeReport(kind="store_fallback", fields={"from": "a", "to": "b", "by": "runtime"})
    assert event_line(fallback, config) == "store of a failing: committing to b's store"
    assert event_line(RuntimeReport(kind="store_fallback", fields={"from": "a", "to": "b"}), config) is None


@pytest.mark.parametrize(
    ("result", "code", "said"),
    [
        ({}, 0, ""),
        ({"status": "INTERRUPTED"}, 130, "interrupted: go on from the newest checkpoint with: python -m orchestrator"),
        ({"status": "FAILED", "user_error": {"error": "ValueError: x", "step": 3, "site": "m.py:4"}}, 3, "m.py:4"),
        ({"status": "FAILED"}, 1, ""),
    ],
)
def test_an_ended_run_exits_as_the_foreground_run_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], result: dict, code: int, said: str
) -> None:
    home, run_dir, j = _run(tmp_path)
    j.emit(AttemptStarted(generation=1, region="local-a"))
    Path(rundir.result_path(run_dir)).write_text(json.dumps({**RESULT, **result}))
    out = io.StringIO()
    assert watch.main(home, "r1", out=out, poll_s=0.01) == code
    assert "-- attempt 1 in local-a: provisioning a cluster" in out.getvalue()
    printed = capsys.readouterr()
    assert "result: " in printed.out and said in printed.err


def test_a_dead_controller_ends_the_watch_with_the_resume_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, run_dir, _j = _run(tmp_path)
    held = lock_controller(run_dir)
    assert held is not None
    held.close()
    assert watch.main(home, "r1", out=io.StringIO(), poll_s=0.01) == 2
    assert "its controller died; continue it with: python -m orchestrator action=resume run_id=r1" in (
        capsys.readouterr().err
    )


def test_no_such_run_is_one_line_naming_run_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert watch.main(str(tmp_path), "nope", out=io.StringIO()) == 2
    assert capsys.readouterr().err.startswith("error: run_id: no run named 'nope'")


def test_ctrl_c_leaves_the_watch_and_not_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home, run_dir, _j = _run(tmp_path)
    held = lock_controller(run_dir)
    assert held is not None

    def interrupted(_s: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(watch.time, "sleep", interrupted)
    out = io.StringIO()
    try:
        assert watch.main(home, "r1", out=out) == 130
    finally:
        held.close()
    assert "watch: left run r1; it goes on" in out.getvalue()
    assert not Path(rundir.result_path(run_dir)).exists()


def test_a_run_that_ended_before_the_watch_showed_progress_still_shows_its_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.sealed import sealed_progress

    home, run_dir, j = _run(tmp_path)
    j.emit(AttemptStarted(generation=1, region="local-a"))
    sealed_progress(run_dir, step=5, total=5, steps_per_s=2.0)
    Path(rundir.result_path(run_dir)).write_text(json.dumps(RESULT))
    out = io.StringIO()
    assert watch.main(home, "r1", out=out, poll_s=0.01) == 0
    assert "] step 5/5 " in out.getvalue(), out.getvalue()


def test_a_supervised_run_is_watched_through_its_controllers_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import threading

    home, run_dir, _j = _run(tmp_path)
    supervisor = lock_controller(run_dir, rundir.SUPERVISOR_LOCK)
    assert supervisor is not None  # alive; the controller (its child) dead for now

    def resumed() -> None:
        threading.Event().wait(0.3)
        Path(rundir.result_path(run_dir)).write_text(json.dumps(RESULT))

    t = threading.Thread(target=resumed)
    t.start()
    try:
        out = io.StringIO()
        assert watch.main(home, "r1", out=out, poll_s=0.01) == 0
    finally:
        t.join()
        supervisor.close()
    assert out.getvalue().count("the controller died; its supervisor resumes it") == 1


def test_a_ctrl_c_lost_where_python_ignores_errors_still_leaves_the_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The KeyboardInterrupt of a SIGINT that lands in an import lock's callback is printed
    # as "Exception ignored" and dropped; the watch leaves all the same at its next look.
    home, run_dir, _j = _run(tmp_path)
    held = lock_controller(run_dir)
    assert held is not None
    looks: list[float] = []

    def pressed_where_it_is_ignored(_s: float) -> None:
        looks.append(_s)
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # as Python does in a callback it ignores errors of
        if len(looks) > 3:
            raise AssertionError("the watch went on after Ctrl-C")

    monkeypatch.setattr(watch.time, "sleep", pressed_where_it_is_ignored)
    out = io.StringIO()
    previous = signal.getsignal(signal.SIGINT)
    try:
        assert watch.main(home, "r1", out=out) == 130
    finally:
        held.close()
    assert len(looks) == 1 and "watch: left run r1; it goes on" in out.getvalue()
    assert signal.getsignal(signal.SIGINT) is previous, "the watch's handler is taken back"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("shape", ["fifo", "folder", "link"])
def test_the_tail_of_a_journal_that_is_no_regular_file_is_refused_at_once(tmp_path: Path, shape: str) -> None:
    path = tmp_path / "journal.jsonl"
    if shape == "fifo":
        os.mkfifo(path)
    elif shape == "folder":
        path.mkdir()
    else:
        (tmp_path / "theirs").write_text('{"ts": 1.0, "type": "run_started"}\n')
        path.symlink_to(tmp_path / "theirs")
    with pytest.raises(DamagedFile, match=r"journal\.jsonl: .* not a regular file"):
        JournalTail(str(path)).read()


def test_a_second_ctrl_c_while_the_watch_says_goodbye_is_ignored() -> None:
    ctrl_c = watch.CtrlC()
    with pytest.raises(KeyboardInterrupt):
        ctrl_c._on_sigint(signal.SIGINT, None)
    ctrl_c._on_sigint(signal.SIGINT, None)  # no second KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        ctrl_c.check()


@pytest.mark.parametrize(("code", "ignored"), [(130, True), (0, False), (1, False)])
def test_the_command_line_ignores_sigint_to_its_end_only_once_it_left_on_ctrl_c(
    code: int, ignored: bool, sigint_default: None
) -> None:
    assert watch.leave_quietly(code) == code
    assert (signal.getsignal(signal.SIGINT) == signal.SIG_IGN) is ignored


def test_a_failover_placed_by_cost_reads_in_the_watch_as_it_did_in_the_foreground() -> None:
    from orchestrator.runstate.events import DecisionMade
    from recovery.detection import FailureKind
    from recovery.policy import Action

    table = [{"region": "local-c", "expected_usd": 0.00031, "expected_hours": 0.0011}, {"region": "local-b"}]
    ev = DecisionMade(Action.FAILOVER, FailureKind.CLUSTER_LOST, region="local-c", placement={"table": table})
    assert (
        event_line(ev) == "failing over to local-c (placement=cost: lowest expected cost to finish, $0.00031, 0.0011 h)"
    )
    hostile = DecisionMade(Action.FAILOVER, FailureKind.CLUSTER_LOST, region="local-c", placement={"table": "x"})
    assert event_line(hostile) == "failing over to local-c"
