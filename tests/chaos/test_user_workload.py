"""A user's own workload class, from a folder outside the repository that only PYTHONPATH
names, under real faults: it ends with exactly the weights of its own uninterrupted run,
and what it printed and logged is in each attempt's rank logs after the clusters are gone.
(A bug in its loss() is a user error with its traceback: tests/unit/orchestrator/runtime/loop/test_train_loop_user.py
drives the worker's entry in Ray's local mode; the CLI's side of a user error is
tests/chaos/test_matrix.py's.)"""

from __future__ import annotations

import io
import shutil

import pytest

from tests.support.invariants import journal_consistent, nothing_left
from tests.support.paths import FIXTURES
from tests.support.runs import orchestrate, ray_pids

FIXTURE = FIXTURES / "tinywork.py"
STEPS = 300
INTERVAL = 25
# dataset() with the global batch split over 2 workers x 2 micro-batches; StepLR; clipping.
JOB = (
    "job.workload=tinywork:Tiny",
    f"job.steps={STEPS}",
    "job.batch_size=32",
    "job.params.step_size=40",
    "trainer.grad_accum_steps=2",
    "trainer.grad_clip_norm=5.0",
    f"checkpoint.interval_steps={INTERVAL}",
)


@pytest.fixture(scope="module")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("user-project")
    shutil.copy(FIXTURE, folder / "tinywork.py")
    return {"PYTHONPATH": str(folder)}


@pytest.fixture(scope="module")
def user_baseline(orch_home, user_env):
    run = orchestrate(orch_home, "tiny-baseline", *JOB, env=user_env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.result["status"] == "SUCCEEDED"
    return run


def test_a_user_workload_runs_from_its_own_folder(user_baseline) -> None:
    r = user_baseline.result
    assert r["final_step"] == STEPS and r["attempts"] == 1
    assert r["metrics"]["accuracy"] > 0.6  # its own evaluate()
    assert r["metrics"]["loss_calls"] == 2 * STEPS  # its own state: 2 micro-batches a step
    assert "tiny-baseline" in r["final_checkpoint"]


def test_kill_worker_preempt_and_kill_region_end_with_the_uninterrupted_weights(orch_home, user_env, user_baseline):
    before = ray_pids()
    # The region is lost in the region the preemption moved the run to. The notice, posted
    # at step 80, is seen within PREEMPT_POLL_S (0.2 s) and honoured at the next tenth
    # step; this workload trains about 125 steps a second on a quiet machine (the notice
    # was once honoured at step 130), so step 250 leaves local-a behind with a wide margin.
    faults = (
        "chaos.faults=[{kind:kill_worker,at_step:40},{kind:preempt,at_step:80,grace_s:15},"
        "{kind:kill_region,at_step:250,region:local-b}]"
    )
    run = orchestrate(orch_home, "tiny-faults", *JOB, faults, "recovery.region_cooldown_s=0", env=user_env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and r["final_step"] == STEPS
    assert r["weights_sha256"] == user_baseline.result["weights_sha256"]
    assert r["metrics"] == user_baseline.result["metrics"]
    assert {e["kind"] for e in run.events("fault_injected")} == {"kill_worker", "preempt", "kill_region"}
    kinds = [inc["kind"] for inc in r["incidents"]]
    assert "preempted" in kinds and "cluster_lost" in kinds, r["incidents"]
    fault_step = {"worker_lost": 40, "cluster_lost": 250}
    for inc in r["incidents"]:
        if inc["kind"] == "preempted":
            assert inc["lost_steps"] in (None, 0), inc
        else:
            # What a kill may lose is the checkpoint of its own step, still uploading when it
            # lands, and the steps trained before it lands (one, once, in CI): never one
            # committed before the fault.
            assert inc["restored_step"] >= fault_step[inc["kind"]] - INTERVAL, inc
    assert [(inc["from_region"], inc["to_region"]) for inc in r["incidents"] if inc["kind"] != "worker_lost"] == [
        ("local-a", "local-b"),
        ("local-b", "local-c"),
    ], r["incidents"]
    assert r["region"] == "local-c"
    journal_consistent(run)
    nothing_left(before, orch_home)
    _prints_are_in_each_attempts_rank_logs(run)


def _prints_are_in_each_attempts_rank_logs(run) -> None:
    """The workload's print and logging reach every attempt's rank logs, kept before each
    cluster went (the lost region's too: on this machine its files outlive its processes),
    as action=logs shows them (its function, in-process: the command line's own path is
    tests/unit/orchestrator/commands/test_logs.py's); each restore it printed is in the attempt
    and ranks that did it."""
    from orchestrator.commands.logs import show

    r = run.result
    kept = {e["generation"]: (e["ranks"], e.get("error")) for e in run.events("logs_kept")}
    assert kept == {a["generation"]: ([0, 1], None) for a in r["attempt_history"]}, kept
    in_place = [inc["restored_step"] for inc in r["incidents"] if inc["kind"] == "worker_lost"]
    for a in r["attempt_history"]:
        # Attempt 1 restored nothing at its start, then once when Ray Train restarted its
        # workers after kill_worker (in place, same attempt, same rank files).
        restores = [*([a["restored_step"]] if a["restored_step"] else []), *(in_place if a["generation"] == 1 else [])]
        assert restores, a
        for rank in (0, 1):
            out = io.StringIO()
            show(str(run.run_dir), run.run_dir.name, a["generation"], str(rank), out)
            text = out.getvalue()
            assert f"--- orchestrator: attempt {a['generation']}, rank {rank}, pid " in text, text[-2000:]
            assert "tinywork: print reached the log" in text and "tinywork: logging reached the log" in text
            for step in restores:
                # Two micro-batches a step: the workload's own loss() count at that checkpoint.
                assert text.count(f"tinywork: restored after {2 * step} loss() calls\n") == 1, text[-2000:]
