"""``python -m orchestrator`` as a user runs it: a bad key is one line and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO


def run_cli(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=REPO,
        env={**os.environ, "ORCHESTRATOR_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_typo_in_a_key_exits_2_with_one_line_naming_the_key_and_no_traceback(tmp_path: Path) -> None:
    proc = run_cli(["trainer.wrkers=3"], tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].strip()
    assert "trainer.wrkers" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout == ""


def test_help_exits_0_and_prints_usage(tmp_path: Path) -> None:
    proc = run_cli(["--help"], tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: python -m orchestrator")
    assert "Traceback" not in proc.stderr


def test_real_processes_exit_2_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_dir = home / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text('{"status": "SUCC')
    cases = [
        (["action=report", f"run_id={tmp_path}/outside"], "error: run_id:"),
        (["job.lr=inf"], "error: job.lr:"),
        (["action=status", "run_id=r1"], "result.json"),
        (["+cloud.control_options.client_kwargs.aws_secret_access_key=x"], "error: cloud.control_options."),
    ]
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home), "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *args],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args, _ in cases
    ]
    for proc, (args, names) in zip(procs, cases, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (args, err)
        assert "Traceback" not in out + err
        assert len(err.splitlines()) == 1 and err.startswith("error: ") and names in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]
    assert sorted(p.name for p in run_dir.iterdir()) == ["result.json"]
