"""job.train_func with FSDP2, written as Ray Train's FSDP guide shows: every rank shards
the model with ``fully_shard``, saves with ``torch.distributed.checkpoint`` into a folder
of its own and passes it to ``ray.train.report``. The run loses its region and resumes
in the next one from the newest verified checkpoint (each rank's shard put by that rank,
one signed manifest), loses a worker there at a reported iteration (the group restarted in
place from that iteration's checkpoint), and ends with exactly the weights of the same run
uninterrupted: the function's own digest and the orchestrator's weights_sha256 alike."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.runs import Run, orchestrate

EPOCHS = 14
SLEEP_S = 0.4
FAULT_AFTER_S = 4.0
# In the second region, after the restore (at most about 10 epochs are done 4 s in).
KILL_WORKER_AT = 12

# Nothing here knows about the orchestrator: it runs as is under a plain TorchTrainer.
USER_CODE = """
import hashlib
import json
import os
import tempfile
import time

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.fsdp import fully_shard

import ray.train
from ray.train import Checkpoint


class AppState(Stateful):
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def state_dict(self):
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optim": optim_state}

    def load_state_dict(self, state_dict):
        set_state_dict(
            self.model, self.optimizer, model_state_dict=state_dict["model"], optim_state_dict=state_dict["optim"]
        )


def train_func(config):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(3)], torch.nn.Linear(16, 1))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            dcp.load({"app": AppState(model, optimizer)}, checkpoint_id=checkpoint_dir)
            with open(os.path.join(checkpoint_dir, "epoch.json")) as fh:
                start = json.load(fh)["epoch"] + 1
    rank = ray.train.get_context().get_world_rank()
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(128, 16, generator=g)
    y = x.sum(dim=1, keepdim=True)

    for epoch in range(start, config["epochs"]):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        time.sleep(config["sleep_s"])
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        digest = hashlib.sha256(b"".join(full[k].numpy().tobytes() for k in sorted(full))).hexdigest()
        metrics = {"loss": loss.item(), "epoch": epoch, "resumed_from_epoch": start, "weights": digest}
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            dcp.save({"app": AppState(model, optimizer)}, checkpoint_id=temp_checkpoint_dir)
            if rank == 0:
                with open(os.path.join(temp_checkpoint_dir, "epoch.json"), "w") as fh:
                    json.dump({"epoch": epoch}, fh)
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(temp_checkpoint_dir))
"""


@pytest.fixture(scope="module")
def user_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("user-fsdp-func")
    (folder / "fn_fsdp.py").write_text(textwrap.dedent(USER_CODE))
    return folder


def run_function(home: Path, run_id: str, code: Path, *overrides: str) -> Run:
    run = orchestrate(
        home,
        run_id,
        "job.train_func=fn_fsdp:train_func",
        f"job.steps={EPOCHS}",
        f"job.params.epochs={EPOCHS}",
        f"job.params.sleep_s={SLEEP_S}",
        "trainer.workers=2",
        *overrides,
        env={"PYTHONPATH": str(code)},
        timeout=540,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_an_fsdp_function_resumes_in_another_region_with_the_uninterrupted_weights(orch_home, user_code) -> None:
    base = run_function(orch_home, "fsdp-func-base", user_code).result
    assert base is not None and base["status"] == "SUCCEEDED" and base["final_step"] == EPOCHS, base
    faults = (
        f"{{kind:kill_region,after_s:{FAULT_AFTER_S},region:local-a}},"
        f"{{kind:kill_worker,at_step:{KILL_WORKER_AT},region:local-b}}"
    )
    run = run_function(orch_home, "fsdp-func-lost", user_code, f"chaos.faults=[{faults}]")
    r = run.result
    assert r is not None and r["status"] == "SUCCEEDED" and r["final_step"] == EPOCHS, r
    lost, worker = r["incidents"]
    assert lost["kind"] == "cluster_lost" and 0 < lost["restored_step"] < KILL_WORKER_AT, lost
    assert worker["kind"] == "worker_lost" and worker["restored_step"] == KILL_WORKER_AT, worker
    # Each rank loaded its shards from the folder get_checkpoint() gave it, and went on exactly.
    assert r["metrics"]["resumed_from_epoch"] == worker["restored_step"]
    assert r["metrics"]["weights"] == base["metrics"]["weights"]
    # The orchestrator's digest of the model in the final DCP checkpoint, layout-free.
    assert base["weights_sha256"] is not None and r["weights_sha256"] == base["weights_sha256"]
    # DCP's files of every rank under one signed manifest, each put by its own rank.
    final = Path(r["final_checkpoint"].removeprefix("file://"))
    assert {".metadata", "__0_0.distcp", "__1_0.distcp", "epoch.json"} <= {p.name for p in final.iterdir()}
    assert not run.events("checkpoint_merge_conflict")
