"""examples/seqproj run as a user runs their own project: from its folder, outside this
repository, with its own job configs (``--config-dir``) and only its folder on PYTHONPATH.

One real run on the local provider (the workload class: dataset(), a StepLR scheduler,
evaluate(), state of its own) must succeed with evaluate()'s metrics and checkpoints that
hold every named part. The command-line mistakes a user makes first stop before anything
launches: exit 2, one line naming the key, no traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from providers.procs import MARKER
from tests.support.runs import Run, env_for, loop_spec, ours


@pytest.fixture(scope="module")
def project(example_project: Path) -> Path:
    return example_project


def cli(
    project: Path, home: Path, *args: str, cwd: Path | None = None, on_path: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m orchestrator --config-dir <project>/conf ARGS`` from the project's folder:
    nothing of this checkout on the path but the installed orchestrator package."""
    env = env_for(home)
    env.pop("PYTHONPATH", None)
    if on_path:
        env["PYTHONPATH"] = str(project)
    argv = [sys.executable, "-m", "orchestrator", "--config-dir", str(project / "conf"), *args]
    return subprocess.run(argv, cwd=cwd or project, env=env, capture_output=True, text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def processes_of(run_id: str, timeout_s: float = 10.0) -> list[int]:
    """Processes still carrying the marker of one of the run's clusters (others' Ray
    clusters on this machine are not ours to count)."""
    import time

    import psutil

    deadline = time.monotonic() + timeout_s
    while True:
        left = []
        for p in psutil.process_iter():
            try:
                if (
                    p.environ().get(MARKER, "").startswith(f"{run_id}-")
                    and p.status() != psutil.STATUS_ZOMBIE
                    and ours(p)
                ):
                    left.append(p.pid)
            except (psutil.Error, OSError):
                continue
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.fixture(scope="module")
def seq_run(example_baseline: Run) -> Run:
    """The session's run of the example (tests/conftest.py; the on-prem run compares with it)."""
    assert not processes_of("seq-example"), "the run left processes of its clusters behind"
    assert not list((example_baseline.run_dir.parent.parent / "clusters").glob("*.json")), "a cluster record left"
    return example_baseline


def test_the_example_workload_trains_to_the_end(seq_run: Run) -> None:
    assert seq_run.returncode == 0, seq_run.stderr[-4000:]
    r = seq_run.result
    assert r is not None and r["status"] == "SUCCEEDED", r
    assert r["final_step"] == 600 and r["attempts"] == 1 and r["incidents"] == []
    # evaluate()'s metrics, its own state's included (the loss average it checkpoints).
    metrics = r["metrics"]
    assert set(metrics) == {"accuracy", "eval_loss", "train_loss_ema"}, metrics
    assert metrics["accuracy"] >= 0.85, metrics
    assert 0 < metrics["eval_loss"] < 0.5 and 0 < metrics["train_loss_ema"] < 0.5, metrics
    assert len(r["weights_sha256"]) == 64


def test_the_checkpoints_hold_every_named_part(seq_run: Run) -> None:
    from recovery.store import CheckpointStore

    url = seq_run.result["final_checkpoint"]
    assert url.rsplit("/", 1)[1].startswith("step-600-g") and "/seq-example/checkpoints/" in url, url
    from recovery.signing import run_keys_of

    key = run_keys_of(str(seq_run.run_dir))
    store = CheckpointStore(url.rsplit("/seq-example/checkpoints/", 1)[0], region="local-a", key=key)
    assert max(store.committed_steps("seq-example")) == 600
    assert store.verify("seq-example", 600).ok
    names = {f.name for f in store.manifest("seq-example", 600).files}
    assert {"model.pt", "optimizer.pt", "scheduler.pt", "workload.pt", "state.pt"} <= names, names
    assert {"rng-rank0.pt", "rng-rank1.pt"} <= names, "two workers, one RNG state each"
    assert "grad_scaler.pt" not in names, "trainer.autocast=none: no scaler"


def test_the_example_workload_resumes_bitwise_equal_in_process(project: Path, tmp_path: Path, monkeypatch) -> None:
    """Without Ray (one worker, the loop in this process): a run that crashes at step 47
    and resumes from its step-40 checkpoint ends with the weights, scheduler and own state
    of one that did not."""
    from orchestrator.runtime.loop.train_loop import _Loop, rng_state, set_rng_state
    from orchestrator.wire import runkey
    from orchestrator.wire.control import ControlChannel
    from orchestrator.wire.spec import RuntimeSpec
    from recovery.keys import controller_keys
    from recovery.store import CheckpointStore

    monkeypatch.syspath_prepend(str(project))
    # The run's key, as the driver installs it: the loop signs every checkpoint it commits.
    monkeypatch.setattr(runkey, "_installed", [controller_keys(bytes(range(32)), "example")])
    threads, rng = torch.get_num_threads(), rng_state()

    def spec(root: Path, generation: int) -> RuntimeSpec:
        return loop_spec(
            root,
            "r",
            generation,
            {
                "name": "seq",
                "workload": "seqmodels.classifier:SeqClassifier",
                "params": {"train_size": 2048, "lr_step": 25},
                "steps": 60,
                "seed": 0,
                "batch_size": 32,
            },
            trainer={"max_worker_restarts": 0},
            # Every checkpoint committed before the next step: a background upload lets a
            # newer snapshot replace one still waiting, and the crash must find step 40.
            checkpoint={"async_upload": False},
        )

    def run(s: RuntimeSpec, crash_at: int = 0) -> dict[str, Any] | None:
        control = ControlChannel(s.control_url)
        loop = _Loop(s, rank=0, world=1, control=control)
        if crash_at:
            real = loop.data.batch

            def batch(at: int, micro: int = 0) -> Any:
                if at == crash_at:
                    raise KeyboardInterrupt  # not an Exception: nothing in the loop catches it
                return real(at, micro)

            loop.data.batch = batch
            with pytest.raises(KeyboardInterrupt):
                loop.run(wrap=lambda m: m)
            return None
        loop.run(wrap=lambda m: m)
        final = control.read_final(s.generation)
        return None if final is None else final.as_dict()

    try:
        unbroken = run(spec(tmp_path / "unbroken", 1))
        run(spec(tmp_path / "resumed", 1), crash_at=47)
        assert CheckpointStore(f"file://{tmp_path}/resumed/store", region="r").committed_steps("r") == [20, 40]
        resumed = run(spec(tmp_path / "resumed", 2))
    finally:
        set_rng_state(rng)
        torch.set_num_threads(threads)
    assert unbroken is not None and resumed is not None
    assert resumed["weights_sha256"] == unbroken["weights_sha256"]
    assert resumed["metrics"] == unbroken["metrics"], "the loss average (workload.pt) came back too"


def test_an_unknown_job_lists_the_users_jobs_with_ours(project: Path, tmp_path: Path) -> None:
    line = one_line_error(cli(project, tmp_path, "job=seqq"))
    assert line.startswith("error: job: got 'seqq'; allowed: ")
    allowed = line.split("allowed: ", 1)[1].split(", ")
    assert {"seq", "seq_func", "digits"} <= set(allowed), allowed


def test_a_wrong_param_names_its_key(project: Path, tmp_path: Path) -> None:
    line = one_line_error(cli(project, tmp_path, "job=seq", "job.params.hiden=16"))
    assert line.startswith("error: job.params.hiden: unknown key; SeqClassifier.Params has: "), line
    line = one_line_error(cli(project, tmp_path, "job=seq", "job.params.hidden=wide"))
    assert line.startswith("error: job.params.hidden: got 'wide'; expected an integer"), line


def test_code_off_the_path_names_job_workload(project: Path, tmp_path: Path) -> None:
    # Run from elsewhere without PYTHONPATH: the user forgot to say where their code is.
    line = one_line_error(cli(project, tmp_path, "job=seq", cwd=tmp_path, on_path=False))
    assert line.startswith("error: job.workload: cannot import 'seqmodels.classifier'"), line
    line = one_line_error(cli(project, tmp_path, "job=seq", "job.workload=seqmodels.nosuch:Model"))
    assert line.startswith("error: job.workload: cannot import 'seqmodels.nosuch'"), line
    line = one_line_error(cli(project, tmp_path, "job=seq", f"job.code_dir={tmp_path / 'nope'}"))
    assert line.startswith("error: job.code_dir: "), line
