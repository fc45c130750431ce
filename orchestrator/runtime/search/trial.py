"""One trial of a search: the job's workload trained in a Tune trial, from its checkpoint.

The search's trials are listed up front from the run's config (hpo.sample_configs), so
that a trial is the same trial, with the same id (``trial_00003``) and values, in every
attempt. Tune runs them as a grid over their indexes (``INDEX``); a trial looks its
values up by index.
"""

from __future__ import annotations

import io
import os
import random
import tempfile
from typing import Any

import numpy as np
import torch

from orchestrator.hpo import trial_key
from orchestrator.runtime.search.snapshot import CHECKPOINT_FILES
from orchestrator.runtime.telemetry import Sampler
from orchestrator.runtime.weights import weights_sha256
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.sections import HpoSection, JobSection
from orchestrator.wire.spec import RuntimeSpec

# The one key of a Tune trial's config: the trial's index in hpo.sample_configs.
INDEX = "trial_index"


def trial_id_of(trial: Any) -> str:
    """A Tune trial's id in this search (``trial_00003``), from its index."""
    return trial_key(int(trial.config[INDEX]))


def load_tensors(data: bytes) -> Any:
    """A checkpoint file of a trial: tensors and plain data only, never a pickle."""
    return torch.load(io.BytesIO(data), weights_only=True)


def read_trial_checkpoint(path: str) -> dict[str, bytes]:
    """A trial's checkpoint folder as Tune keeps it: each of CHECKPOINT_FILES, by name."""
    parts = {}
    for name in CHECKPOINT_FILES:
        with open(os.path.join(path, name), "rb") as fh:
            parts[name] = fh.read()
    return parts


def trial_inputs(spec: RuntimeSpec, hpo: HpoSection, configs: list[dict[str, Any]]) -> dict[str, Any]:
    """What every trial gets besides its index (``trial_func``'s ``runtime``)."""
    return {
        "hpo": hpo,
        "job": spec.job,
        "data": spec.data,
        "configs": configs,
        "control_url": spec.control_url,
        "control_options": spec.control_options,
        "generation": spec.generation,
    }


def trial_func(config: dict[str, Any], runtime: dict[str, Any], resume: dict[str, dict[str, bytes]]) -> None:
    """One trial: the job's workload trained in-process (one worker), an evaluation and a
    checkpoint every ``steps_per_iteration`` steps; it goes on from Tune's checkpoint (a
    retry within this attempt) or else from the snapshot's (``resume``), if any."""
    from ray import tune  # in the trial's process; the rest of this module needs no Ray

    from orchestrator.workloads import make_workload

    hpo: HpoSection = runtime["hpo"]
    job: JobSection = runtime["job"]
    index = int(config[INDEX])
    trial_id = trial_key(index)
    values = runtime["configs"][index]
    control = ControlChannel(runtime["control_url"], runtime.get("control_options"))
    gen = int(runtime["generation"])
    torch.set_num_threads(1)
    torch.manual_seed(job.seed)
    random.seed(job.seed)
    np.random.seed(job.seed)
    # The trial's values (job keys: lr, hidden_size, batch_size) over the job's.
    workload = make_workload({**job.to_plain(), **values}, runtime["data"].to_plain())
    model = workload.model()
    optimizer = workload.optimizer(model)
    parts: dict[str, bytes] | None = resume.get(trial_id)
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            parts = read_trial_checkpoint(d)
    start = 0
    if parts is not None:
        model.load_state_dict(load_tensors(parts["model.pt"]))
        optimizer.load_state_dict(load_tensors(parts["optimizer.pt"]))
        start = int(load_tensors(parts["state.pt"])["iteration"])
        control.event(gen, "trial_restored", trial_id=trial_id, iteration=start, pid=os.getpid())
    else:
        control.event(gen, "trial_started", trial_id=trial_id, config=values)
    spi = hpo.steps_per_iteration
    sampler = Sampler(rank=0).start()
    try:
        for it in range(start + 1, hpo.max_t + 1):
            # Steps (it-1)*spi+1 .. it*spi: the data position is the iteration.
            for step in range((it - 1) * spi + 1, it * spi + 1):
                x, y = workload.batch(step, 0, 1)
                optimizer.zero_grad(set_to_none=True)
                workload.loss(model, (x, y)).backward()
                optimizer.step()
                sampler.count(len(x))
            metrics = workload.evaluate(model)
            with tempfile.TemporaryDirectory(prefix="trial-ckpt-") as d:
                torch.save(model.state_dict(), os.path.join(d, "model.pt"))
                torch.save(optimizer.state_dict(), os.path.join(d, "optimizer.pt"))
                torch.save(
                    {"iteration": it, "trial_id": trial_id, "data_position": it * spi}, os.path.join(d, "state.pt")
                )
                tune.report(
                    {
                        **metrics,
                        "iteration": it,
                        "weights_sha256": weights_sha256(model.state_dict()),
                        "telemetry": sampler.snapshot().to_json(),
                    },
                    checkpoint=tune.Checkpoint.from_directory(d),
                )
    finally:
        sampler.stop()
