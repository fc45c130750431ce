"""Every way a run's controller stops short or runs away from its terminal, on one run
(one baseline, CI's time): Ctrl-C ends it INTERRUPTED with its checkpoints and no process
left; ``detach=true`` returns at once and ``action=watch`` follows it (Ctrl-C leaves the
watch, not the run); ``action=stop`` from another process ends it as Ctrl-C does, naming
who asked; a controller SIGKILLed shows in ``action=status`` as dead, with the command
that goes on; and that command, detached and watched to its end, ends the run with
exactly the weights of a run never stopped. On a second run: ``action=drill`` fails a
detached run over, and ``action=cancel`` ends it for good."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.paths import REPO
from tests.support.runs import env_for, orch, ray_pids, wait_no_new_ray


def _orch(orch_home: Path, *args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return orch(orch_home, *args, timeout=timeout)


def _start(orch_home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=REPO,
        env=env_for(orch_home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _said(proc: subprocess.Popen[str]) -> tuple[list[str], threading.Thread]:
    """``proc``'s stderr lines as they come, and the thread reading them until it ends
    (join it once ``proc`` has exited: then every line is in)."""
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        lines.extend(iter(proc.stderr.readline, ""))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


def _newest_step(run_dir: Path) -> int:
    steps = (run_dir.parent.parent / "stores" / "local-a" / run_dir.name / "checkpoints").glob("step-*")
    return max((int(p.name.split("-")[1]) for p in steps), default=0)


def _wait_training(run_dir: Path, proc: subprocess.Popen[str] | None, times: int) -> None:
    """Until the run's ``times``-th attempt trains and commits a checkpoint of its own (a
    detached one: no ``proc`` to watch). A commit, not a sleep: digits runs some hundred
    steps a second, and three attempts must share its 2000 steps."""
    deadline = time.monotonic() + 120
    committed: int | None = None
    while time.monotonic() < deadline:
        journal = run_dir / "journal.jsonl"
        text = journal.read_text() if journal.exists() else ""
        if committed is None and text.count('"runtime.train_started"') >= times:
            committed = text.count('"runtime.checkpoint_committed"')
        if committed is not None and text.count('"runtime.checkpoint_committed"') > committed:
            return
        assert proc is None or proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("training never started")


def _detach(orch_home: Path, *args: str) -> str:
    """``detach=true``: back within 30 s, saying how to follow the run."""
    t0 = time.monotonic()
    started = _orch(orch_home, *args, "detach=true", timeout=60)
    took = time.monotonic() - t0
    assert started.returncode == 0, started.stderr[-2000:]
    assert took < 30, f"detach=true took {took:.1f}s"
    assert "in the background" in started.stdout and "action=watch run_id=stopped" in started.stdout
    return started.stdout


def test_ctrl_c_stop_a_dead_controller_then_resume_end_with_the_unstopped_weights(orch_home, long_baseline):
    before = ray_pids()
    run_dir = orch_home / "runs" / "stopped"
    # long_baseline's job: the weights the resumed run must end with.
    proc = _start(orch_home, "job=digits", "run_id=stopped", "progress=false", "job.steps=2000")
    try:
        _wait_training(run_dir, proc, 1)
        proc.send_signal(signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # the controller dumps its threads' stacks
            time.sleep(2)
            proc.kill()
            _out, err = proc.communicate()
            raise AssertionError(f"the controller did not end after SIGINT; its stacks:\n{err[-6000:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert "action=resume run_id=stopped" in err, "the way on is printed"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "INTERRUPTED" and result["reason"].startswith("interrupted (SIGINT/SIGTERM)")
    assert result["final_checkpoint"], "checkpoints made before the interrupt are kept"
    assert not wait_no_new_ray(before)
    stopped_at = _newest_step(run_dir)
    assert stopped_at < 2000, "interrupted before the end"

    # Resumed in the background; watched, and the watch left with Ctrl-C; then stopped
    # from another process.
    _detach(orch_home, "action=resume", "run_id=stopped")
    _wait_training(run_dir, None, 2)
    watcher = _start(orch_home, "action=watch", "run_id=stopped")
    # Left as soon as it follows the run (a fixed 3 s let digits, some hundred steps a
    # second, reach step 2000 before the stop below: nothing was left to resume).
    said, reader = _said(watcher)
    deadline = time.monotonic() + 30
    while "-- training from step " not in "".join(said) and watcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    watcher.send_signal(signal.SIGINT)
    watcher.wait(timeout=30)
    reader.join(timeout=30)
    err = "".join(said)
    assert watcher.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert "-- training from step " in err and "watch: left run stopped; it goes on" in err
    assert not (run_dir / "result.json").exists(), "leaving the watch leaves the run"
    stop = _orch(orch_home, "action=stop", "run_id=stopped")
    assert stop.returncode == 0, stop.stderr[-2000:]
    assert "INTERRUPTED" in stop.stdout and "action=resume run_id=stopped" in stop.stdout
    log = (run_dir / "controller.log").read_text()
    assert "Traceback" not in log and "interrupted: go on from the newest checkpoint" in log, log[-2000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "INTERRUPTED" and result["final_checkpoint"]
    assert "stopped by action=stop (" in result["reason"] and " pid " in result["reason"]
    assert not (run_dir / "stop.request").exists()
    assert not wait_no_new_ray(before)
    # A second stop finds nothing to stop.
    again = _orch(orch_home, "action=stop", "run_id=stopped")
    assert again.returncode == 0 and "already ended (INTERRUPTED)" in again.stderr

    # The resumed controller dies with no word (SIGKILL): status says so, and how to go on.
    proc = _start(orch_home, "action=resume", "run_id=stopped", "progress=false")
    try:
        _wait_training(run_dir, proc, 3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    status = _orch(orch_home, "action=status", "run_id=stopped")
    assert status.returncode == 0, status.stderr[-2000:]
    assert "status     CONTROLLER_DIED  (its controller died; continue it with: " in status.stdout
    assert "action=resume run_id=stopped home=" in status.stdout
    dead = _orch(orch_home, "action=stop", "run_id=stopped")
    assert dead.returncode != 0 and "its controller is not running" in dead.stderr

    # Resumed in the background and watched to its end: the foreground run's exit status.
    _detach(orch_home, "action=resume", "run_id=stopped")
    watched = _orch(orch_home, "action=watch", "run_id=stopped", timeout=400)
    assert watched.returncode == 0, watched.stderr[-3000:]
    assert "status     SUCCEEDED" in watched.stdout and re.search(r"\] step \d+/2000 ", watched.stderr), watched.stderr
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "SUCCEEDED" and result["final_step"] == 2000
    assert result["weights_sha256"] == long_baseline.result["weights_sha256"]
    # Nothing failed but the controller: its loss is the one incident.
    assert [inc["kind"] for inc in result["incidents"]] == ["controller_lost"] and result["attempts"] >= 3
    journal = map(json.loads, (run_dir / "journal.jsonl").read_text().splitlines())
    attempts = [e for e in journal if e["type"] == "attempt_ended"]
    assert [a["outcome"] for a in attempts[:2]] == ["interrupted", "interrupted"]
    assert attempts[-1]["outcome"] == "succeeded"
    assert 0 < attempts[1]["restored_step"] <= stopped_at
    assert not wait_no_new_ray(before)


def test_a_drill_fails_a_detached_run_over_then_cancel_ends_it_for_good(orch_home):
    """``action=drill fault=kill_region`` on a detached run: injected at once, journaled with
    who asked, the run fails over; then ``action=cancel``: as a stop (clusters down,
    checkpoints kept), then CANCELLED for good, which action=resume refuses."""
    before = ray_pids()
    started = _orch(
        orch_home, "job=digits", "job.steps=100000", "run_id=cancelled", "progress=false", "detach=true", timeout=60
    )
    assert started.returncode == 0, started.stderr[-2000:]
    run_dir = orch_home / "runs" / "cancelled"
    _wait_training(run_dir, None, 1)
    refused = _orch(orch_home, "action=drill", "run_id=cancelled", "fault=kill_node")
    assert refused.returncode == 2 and "nodes to 2 or more" in refused.stderr, refused.stderr[-2000:]
    drilled = _orch(orch_home, "action=drill", "run_id=cancelled", "fault=kill_region")
    assert drilled.returncode == 0, drilled.stderr[-2000:]
    assert re.fullmatch(
        r"run cancelled: kill_region injected at step \d+ in local-a; follow it with: .*\n", drilled.stdout
    )
    _wait_training(run_dir, None, 2)
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    (asked,) = [e for e in journal if e["type"] == "drill_requested"]
    assert asked["kind"] == "kill_region" and " pid " in asked["who"] and "refused" not in asked
    cancel = _orch(orch_home, "action=cancel", "run_id=cancelled")
    assert cancel.returncode == 0 and cancel.stdout.strip() == "run cancelled: CANCELLED", cancel.stderr[-2000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "CANCELLED" and result["final_checkpoint"], result
    assert result["reason"].startswith("cancelled by action=cancel (") and "not resumable" in result["reason"]
    assert [(i["kind"], i["from_region"], i["to_region"]) for i in result["incidents"]] == [
        ("cluster_lost", "local-a", "local-b")
    ]
    assert not wait_no_new_ray(before)
    resume = _orch(orch_home, "action=resume", "run_id=cancelled")
    assert resume.returncode == 1 and "already finished (CANCELLED); nothing to resume" in resume.stderr
    status = _orch(orch_home, "action=status", "run_id=cancelled")
    assert "status     CANCELLED" in status.stdout, status.stdout
    listed = _orch(orch_home, "action=list", "format=json")
    assert {r["run_id"]: r["status"] for r in json.loads(listed.stdout)}["cancelled"] == "CANCELLED"
