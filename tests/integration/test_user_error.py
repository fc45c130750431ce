"""A user's deterministic bug costs one launch, never a restart nor a failover: a workload
class outside this repository whose ``loss()`` raises in a fixed step, run as a user runs
it (``PYTHONPATH``, ``job.workload=module:Class``) on the local provider's real Ray. The
worker runs the failing micro-batch once more, meets the same error, and the controller
gives up at once; the error's one line comes first, the traceback without our frames."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.runs import orchestrate, ray_pids, wait_no_new_ray

BUGGY = """\
import torch
from torch import nn


class Net:
    def __init__(self, params):
        self.at = int(params["at"])
        self.step = 0

    def model(self):
        return nn.Linear(4, 1)

    def optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def batch(self, i, rank, world):
        self.step = i
        g = torch.Generator().manual_seed(i * 100 + rank)
        return torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)

    def loss(self, model, batch):
        x, y = batch
        if self.step == self.at:
            raise ValueError(f"loss exploded in step {self.step}")
        return ((model(x) - y) ** 2).mean()
"""


def test_a_loss_that_raises_in_the_same_step_fails_after_one_launch_naming_file_and_line_first(
    orch_home: Path, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "buggy_workload.py").write_text(BUGGY)
    line = BUGGY.splitlines().index('            raise ValueError(f"loss exploded in step {self.step}")') + 1
    site = f"{project / 'buggy_workload.py'}:{line}"
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(project)) if p)
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "user-error-same-step",
        "job.workload=buggy_workload:Net",
        "job.params.at=5",
        "job.steps=8",
        "checkpoint.interval_steps=2",
        "trainer.workers=1",
        # Budget for three restarts: the replay, not the budget, ends the run.
        "recovery.max_restarts_on_errors=3",
        timeout=240,
        env={"PYTHONPATH": path},
    )
    r = run.result
    assert r is not None, run.stderr[-3000:]
    assert run.returncode == 3, (run.returncode, run.stderr[-3000:])
    assert r["status"] == "FAILED"
    assert r["user_error"] == {"error": "ValueError: loss exploded in step 5", "step": 5, "site": site}
    assert f"ValueError: loss exploded in step 5 at {site} in step 5" in r["reason"]
    assert "run once more in the same process" in r["reason"]
    # One launch: no restart in place, no failover, no other region.
    assert [(a["region"], a["restored_step"], a["outcome"]) for a in r["attempt_history"]] == [
        ("local-a", 0, "user_error"),
    ]
    assert [d["action"] for d in run.events("decision")] == ["give_up"]
    assert len(run.events("provisioned")) == 1
    (event,) = run.events("user_error")
    assert event["deterministic"] is True
    # The traceback shows the user's frames, not the loop that called them.
    assert "buggy_workload.py" in r["error_traceback"] and "orchestrator/runtime" not in r["error_traceback"]
    # The one line that says what raised, where, in which step and what to do comes first:
    # before the summary (stdout), and it is stderr's last line too.
    errors = [x for x in run.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == run.stderr.strip().splitlines()[-1], run.stderr[-2000:]
    assert errors[0].startswith("error: run user-error-same-step: the workload raised ValueError"), errors
    assert site in errors[0] and "fix the code" in errors[0]
    assert not wait_no_new_ray(before)
