"""A writer of the control store who holds no key, live: whatever it forges there (the
lease, claims, the attempt's events, preemption notices and progress, later mirrors)
neither ends, stops nor steers a run, nor keeps a takeover from the newest mirror that
verifies. Both runs end with the uninterrupted run's weights.

The control store is a folder shared by both "machines" (each a home of its own); the
user's control key is in every controller's environment, never in the forger's hands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.invariants import INTERVAL, survived
from tests.support.paths import REPO
from tests.support.runs import Run, env_for, ray_pids, wait_no_new_ray

KEY = {"ORCHESTRATOR_CONTROL_KEY": "0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c"}
LEASE_S = 8


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", "progress=false", *args]


def _finish(home: Path, run_id: str, proc: subprocess.Popen[str], timeout: float = 400) -> Run:
    out, err = proc.communicate(timeout=timeout)
    run_dir = home / "runs" / run_id
    path = run_dir / "result.json"
    return Run(proc.returncode, out, err, run_dir, json.loads(path.read_text()) if path.exists() else None)


class Forger:
    """A store writer without the key, in a thread: every 0.1 s, one of the lease's
    forgeries (rotated each second), claims, and in each generation's control folder a
    user_error event, a preemption notice and a progress near the end."""

    LEASES = ("empty", "deleted", "unsigned-next")

    def __init__(self, root: Path) -> None:
        self.root = root
        self.stop = threading.Event()
        self.rounds = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Forger:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def _loop(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(0.1):
            try:
                self._forge(self.LEASES[int(time.monotonic() - started) % len(self.LEASES)])
                self.rounds += 1
            except OSError:
                pass  # a folder the run itself is renaming into: the next round

    def _write(self, path: Path, text: str) -> None:
        # Whole or not at all, as a writer of an object store does: a reader that meets a
        # half-written file reports "is empty", a line of its own per kind of forgery.
        tmp = self.root.parent / f".forger-{self.rounds}"
        tmp.write_text(text)
        os.replace(tmp, path)

    def _forge(self, lease: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "lease.json"
        now = time.time()
        if lease == "empty":
            self._write(path, "{}")
        elif lease == "deleted":
            path.unlink(missing_ok=True)
        else:
            claim = {"run_id": self.root.name, "controller": 2, "token": "forged", "host": "forger", "pid": 1}
            self._write(path, json.dumps({**claim, "renewed_at": now, "expires_at": now + 1e9, "released": False}))
        claims = self.root / "claims"
        claims.mkdir(exist_ok=True)
        for name in ("c2", "c999999999"):
            self._write(claims / name, json.dumps({"token": "forged"}))
        for gen in (1, 2):
            folder = self.root / "control" / f"g{gen}"
            (folder / "events").mkdir(parents=True, exist_ok=True)
            event = {"time": now, "generation": gen, "type": "user_error", "rank": 0, "step": 3}
            event["error"] = "ValueError: forged by a store writer"
            self._write(folder / "events" / f"{now:017.6f}-deadbeef.json", json.dumps(event))
            self._write(folder / "preempt.json", json.dumps({"time": now, "generation": gen, "pid": 1}))
            progress = {"time": now, "generation": gen, "step": 499, "total": 500}
            self._write(folder / "progress.json", json.dumps(progress))


def test_a_store_writer_forging_the_lease_claims_events_notices_and_progress_changes_nothing(tmp_path, baseline):
    before = ray_pids()
    home = tmp_path / "machine-a"
    control = tmp_path / "shared" / "control"
    args = ("job=digits", "run_id=forged", f"cloud.control_store=file://{control}")
    proc = subprocess.Popen(
        _argv(*args, f"recovery.controller_lease_s={LEASE_S}"),
        cwd=REPO,
        env=env_for(home, KEY),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    shown = ""
    try:
        with Forger(control / "forged") as forger:
            deadline = time.monotonic() + 300
            while proc.poll() is None and time.monotonic() < deadline:
                if not shown and _training(home / "runs" / "forged"):
                    time.sleep(1.0)
                    shown = subprocess.run(
                        _argv("action=status", "run_id=forged"),
                        cwd=REPO,
                        env=env_for(home),
                        capture_output=True,
                        text=True,
                        timeout=60,
                    ).stdout
                time.sleep(0.2)
        run = _finish(home, "forged", proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    r = survived(run, baseline)
    assert forger.rounds > 20, "the forger hardly ran: the test proves nothing"
    assert r["incidents"] == [] and r["attempts"] == 1, r
    journal = run.journal()
    types = [e["type"] for e in journal]
    assert "controller_stood_down" not in types and "runtime.user_error" not in types, types
    assert not run.events("preempted") and not run.events("preemption_notice")
    # One line per kind of forgery: what was dropped, and why.
    invalid = [(e["path"], e["reason"]) for e in run.events("control_invalid")]
    for kind in ("g1/events/*.json", "g1/progress.json"):
        hits = [why for path, why in invalid if path == kind]
        assert len(hits) == 1 and "not signed" in hits[0], (kind, invalid)
    # The notice is the workers' to read: rank 0 says it ignored it, once.
    (notice,) = run.events("preemption_notice_invalid")
    assert "preempt.json is not signed" in notice["reason"] and notice["rank"] == 0, notice
    ignored = {e["reason"] for e in run.events("lease_ignored")}
    assert ignored, "the holder never met a forged lease"
    assert ignored <= {
        "lease.json is not a lease",
        "gone from the control store",
        "lease.json does not verify under this run's key (altered, or another key's)",
        "lease.json is not JSON",
    }, ignored
    # A live status never showed the forged progress (499/500 a few steps in).
    assert shown and "status     RUNNING" in shown and "499/500" not in shown.split("step")[1].split("\n")[0], shown
    assert not wait_no_new_ray(before)


def _training(run_dir: Path) -> bool:
    try:
        return '"runtime.train_started"' in (run_dir / "journal.jsonl").read_text()
    except FileNotFoundError:
        return False


def test_a_takeover_passes_over_planted_mirrors_and_claims_and_restores_the_newest_that_verifies(tmp_path, baseline):
    """controller_host_loss, then (while no controller runs) a FIFO, a link and a folder at
    later mirrors' index.json, an earlier index copied to a later one, and a claim of
    controller 999999999: the new
    machine restores controller 1's mirror, says why it passed over each, becomes
    controller 2, and ends exactly."""
    before = ray_pids()
    home_a, home_b = tmp_path / "machine-a", tmp_path / "machine-b"
    control = tmp_path / "shared" / "control"
    store = f"cloud.control_store=file://{control}"
    shared = [f"cloud.regions.{r}.store=file://{tmp_path}/shared/{r}" for r in ("local-a", "local-b", "local-c")]
    args = ("job=digits", "run_id=planted", *shared, f"recovery.controller_lease_s={LEASE_S}")
    lost = subprocess.run(
        _argv(*args, store, "chaos.faults=[{kind:controller_host_loss,at_step:100}]"),
        cwd=REPO,
        env=env_for(home_a, KEY),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert lost.returncode == -9, lost.stderr[-2000:]
    state = control / "planted" / "state"
    for gen, plant in ((2, "fifo"), (3, "link"), (4, "folder"), (5, "copy")):
        folder = state / f"c{gen}"
        folder.mkdir(parents=True)
        index = folder / "index.json"
        if plant == "fifo":
            os.mkfifo(index)
        elif plant == "link":
            index.symlink_to(state / "c1" / "index.json")
        elif plant == "folder":
            index.mkdir()
        else:  # controller 1's own index, put back as a later one's: it names controller 1
            index.write_bytes((state / "c1" / "index.json").read_bytes())
    (control / "planted" / "claims" / "c999999999").write_text("{}")
    time.sleep(LEASE_S + 1)
    proc = subprocess.Popen(
        _argv("action=resume", "run_id=planted", store),
        cwd=REPO,
        env=env_for(home_b, KEY),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    taken = _finish(home_b, "planted", proc, timeout=600)
    survived(taken, baseline, max_lost=2 * INTERVAL)
    journal = taken.journal()
    (restored,) = [e for e in journal if e["type"] == "mirror_restored"]
    assert restored["controller"] == 1, restored
    skipped = " | ".join(restored["skipped"])
    for gen in (2, 3, 4):
        assert f"c{gen}: index.json is not a file" in skipped, skipped
    assert "c5: names another run or controller" in skipped, skipped
    leases = [(e["controller"], e.get("previous_controller")) for e in journal if e["type"] == "lease_taken"]
    assert leases == [(1, None), (2, 1)], leases
    assert not wait_no_new_ray(before)
