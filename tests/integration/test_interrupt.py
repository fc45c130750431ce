"""Ctrl-C mid-run: the run stops INTERRUPTED with its checkpoints and no process left, and
``action=resume`` takes it on to exactly the weights of a run never interrupted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from tests.support.paths import REPO
from tests.support.runs import env_for, ray_pids, wait_no_new_ray


def test_sigint_stops_the_run_interrupted_and_resume_ends_with_the_uninterrupted_weights(orch_home, long_baseline):
    before = ray_pids()
    run_dir = orch_home / "runs" / "interrupted"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "job=digits",
            "run_id=interrupted",
            "progress=false",
            # long_baseline's job: the weights the resumed run must end with.
            "job.steps=2000",
        ],
        cwd=REPO,
        env=env_for(orch_home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            journal = run_dir / "journal.jsonl"
            if journal.exists() and '"runtime.train_started"' in journal.read_text():
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        else:
            raise AssertionError("training never started")
        time.sleep(2)  # let a checkpoint or two commit
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
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert "action=resume run_id=interrupted" in err, "the way on is printed"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "INTERRUPTED"
    assert "interrupted" in result["reason"]
    assert result["final_checkpoint"], "checkpoints made before the interrupt are kept"
    assert not wait_no_new_ray(before)
    stopped_at = max(
        int(p.name.split("-")[1])
        for p in (orch_home / "stores" / "local-a" / "interrupted" / "checkpoints").glob("step-*")
    )
    assert stopped_at < 2000, "interrupted before the end"

    resumed = subprocess.run(
        [sys.executable, "-m", "orchestrator", "action=resume", "run_id=interrupted", "progress=false"],
        cwd=REPO,
        env=env_for(orch_home),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "SUCCEEDED" and result["final_step"] == 2000
    assert result["weights_sha256"] == long_baseline.result["weights_sha256"]
    # Nothing failed: no incident; the second attempt restored a checkpoint of the first.
    assert result["incidents"] == [] and result["attempts"] == 2
    attempts = [
        e for e in map(json.loads, (run_dir / "journal.jsonl").read_text().splitlines()) if e["type"] == "attempt_ended"
    ]
    assert [a["outcome"] for a in attempts] == ["interrupted", "succeeded"]
    assert 0 < attempts[1]["restored_step"] <= stopped_at
    assert not wait_no_new_ray(before)
