"""Ctrl-C mid-run: the run ends FAILED (resumable from its checkpoints) and no process is left."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from support import REPO, env_for, ray_pids, wait_no_new_ray


def test_sigint_tears_down_and_keeps_checkpoints(orch_home):
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
            "job.steps=20000",
            "checkpoint.interval_steps=100",
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
    assert proc.returncode == 1, err[-2000:]
    assert "Traceback" not in err
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "FAILED"
    assert "interrupted" in result["reason"]
    assert result["final_checkpoint"], "checkpoints made before the interrupt are kept"
    assert not wait_no_new_ray(before)
