"""The Python API as a notebook uses it, against real local Ray clusters: a run launched in
the background, its events followed to its end and its result read; then another stopped
once it has committed a checkpoint, and resumed to SUCCEEDED from it. Three cluster
starts in all (each about 18 s here), under the session's home."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.runstate.events import RunStarted, RuntimeReport

STEPS = 1200  # long enough that a stop after the first checkpoint lands before the end (about 150 steps in)


@pytest.fixture(autouse=True)
def _no_outside_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    # The run's controller starts clusters of its own; one named here would be joined instead.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_a_run_launched_in_the_background_is_followed_to_its_end_and_its_result_read(orch_home: Path) -> None:
    import orchestrator as orch

    cfg = orch.compose("job=digits", "run_id=nb-first", home=orch_home)
    cfg.job.steps = 200
    cfg.progress = False
    run = orch.launch(cfg)
    assert run.run_id == "nb-first" and run.home == str(orch_home)

    events = list(run.events(follow=True, poll_s=0.2))
    assert isinstance(events[0], RunStarted)
    kinds = {e.kind for e in events if isinstance(e, RuntimeReport)}
    assert {"train_started", "checkpoint_committed"} <= kinds

    result = run.wait(timeout=60)
    assert result.succeeded and result.final_step == 200 and result.weights_sha256, result.raw
    assert result == run.result() and result.attempts == 1 and result.incidents == []
    status = run.status()
    assert status.state == "SUCCEEDED" and status.result == result and "SUCCEEDED" in str(status)
    assert "nb-first" in {row.run_id for row in orch.runs(orch_home)}
    assert orch.attach("nb-first", orch_home) == run


def test_a_run_stopped_from_python_resumes_to_its_end(orch_home: Path) -> None:
    import orchestrator as orch

    run = orch.launch(orch.compose("job=digits", f"job.steps={STEPS}", "progress=false", home=orch_home))
    for event in run.events(follow=True, poll_s=0.1):
        if isinstance(event, RuntimeReport) and event.kind == "checkpoint_committed":
            break
    progress = run.progress()
    assert progress is None or (progress.attempt == 1 and progress.total == STEPS)

    stopped = run.stop()
    assert stopped is not None and stopped.status == "INTERRUPTED" and stopped.resumable, stopped
    assert stopped.final_checkpoint and "from Python" in stopped.reason
    assert (stopped.final_step or 0) < STEPS, "stopped before the end"
    assert run.stop() == stopped, "a second stop finds it stopped and asks nothing"

    assert run.resume() is run
    result = run.wait(timeout=300)
    assert result.status == "SUCCEEDED" and result.final_step == STEPS, result.raw
    assert result.attempts >= 2 and result.weights_sha256
