"""A Ray Train trial (``hpo.trial.workers`` > 1, or ``data.loader=ray_data`` at any
world size): a Ray Train run inside its Tune trial.

The Tune trial (``train_trial``, 0 CPUs of its own) starts a TorchTrainer of
``hpo.trial.workers`` workers, each ``hpo.trial.cpus_per_worker`` CPUs and
``gpus_per_worker`` GPUs, running ``trial_worker``: the trial's TrialLoop at its rank
(DDP, the batch split as a run splits it), from the checkpoint the trial resumes from
(Tune's, within an attempt; the search snapshot's, after a failover), handed to the
workers through Ray's object store. With ``data.loader=ray_data`` the trial's training
set is a Ray Data dataset that Ray Train splits to its workers, as a run's is. At each
iteration every rank reports to Ray Train with its part of the checkpoint (rank 0: the
model, optimizer and trial state; each rank: its RNG states), which Ray Train gathers in
one folder; a callback in Ray Train's controller passes rank 0's metrics and that folder
to the Tune trial, which reports them to Tune as a world-of-one trial does, so the
scheduler, the searcher and the snapshots see a multi-worker trial as any other.

Ray Train restarts nothing itself (``max_failures=0``): a failed worker fails the trial,
and Tune's retry (``trainer.max_worker_restarts``) starts it again from its newest
checkpoint, exactly.
"""

from __future__ import annotations

import tempfile
import threading
import uuid
from typing import Any

from orchestrator.hpo import trial_key
from orchestrator.runtime.search.groups import PLACEMENT_GROUP, own_group
from orchestrator.runtime.search.trial import (
    INDEX,
    RANK_TELEMETRY,
    VALUES,
    TrialLoop,
    announce,
    load_tensors,
    resumed_parts,
    trial_report,
    trial_sections,
)

# Ray Train's folders of a trial's checkpoints: two kept (the newest one is Tune's by then).
KEEP = 2


def trial_worker(config: dict[str, Any]) -> None:
    """One rank of a multi-worker trial (a Ray Train worker)."""
    import ray
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    loop = TrialLoop(config["runtime"], int(config["index"]), config["values"], rank, world, device)
    parts = ray.get(config["parts"]) if config["parts"] is not None else None
    start = loop.restore(parts) if parts else 0

    def report(iteration: int, metrics: dict[str, float], folder: str) -> None:
        # Every rank's telemetry (rank 0's in its trial report): the forwarder gathers them.
        if rank == 0:
            payload = {**trial_report(loop, iteration, metrics), PLACEMENT_GROUP: own_group()}
        else:
            payload = {"iteration": iteration, "telemetry": loop.feed.sampler.snapshot().to_json()}
        ray.train.report(payload, checkpoint=ray.train.Checkpoint.from_directory(folder))

    loop.run(start, report)


def forwarder(queue: Any) -> Any:
    """A Ray Train callback (in its controller) that hands each report, rank 0's metrics
    with every rank's telemetry (``RANK_TELEMETRY``, in rank order) and the gathered
    checkpoint folder, to the Tune trial through ``queue``."""
    from ray.train.v2.api.callback import UserCallback

    class Forward(UserCallback):
        def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
            ranks = [m.get("telemetry") for m in metrics]
            queue.put(({**metrics[0], RANK_TELEMETRY: ranks}, None if checkpoint is None else checkpoint.path))

    return Forward()


def train_trial(config: dict[str, Any], runtime: dict[str, Any], resume: dict[str, dict[str, bytes]]) -> None:
    """The Tune trial of a multi-worker trial: its Ray Train run, each report on to Tune."""
    import ray
    from ray import tune
    from ray.util.queue import Queue

    index = int(config[INDEX])
    values = config.get(VALUES) or runtime["configs"][index]
    trial_id = trial_key(index)
    parts = resumed_parts(trial_id, resume)
    restored = None if parts is None else int(load_tensors(parts["state.pt"])["iteration"])
    announce(runtime, trial_id, values, restored, workers=runtime["hpo"].trial.workers)
    reports: Any = Queue(actor_options={"num_cpus": 0})
    loop_config = {
        "runtime": runtime,
        "index": index,
        "values": values,
        "parts": None if parts is None else ray.put(parts),
    }
    trainer = torch_trainer(trial_worker, loop_config, runtime, trial_id, reports, **trial_datasets(runtime, values))
    for metrics, folder in forwarded(trainer, reports, trial_id):
        if folder is not None:
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


def trial_datasets(runtime: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """data.loader=ray_data: the trial's training set as a Ray Data dataset, split by Ray
    Train to its workers as a run's is (the trial's own values may shape the workload)."""
    job, _, data = trial_sections(runtime, values)
    if data.loader != "ray_data":
        return {}
    from orchestrator.workloads import make_workload
    from orchestrator.workloads.data import DATASET_KEY, data_config, ray_dataset

    workload = make_workload(job.to_plain(), data.to_plain())
    return {"datasets": {DATASET_KEY: ray_dataset(workload)}, "dataset_config": data_config()}


def trial_scaling(trial: Any) -> dict[str, Any]:
    """A trial's Ray Train workers (``hpo.trial``): how many, and each one's CPUs and GPUs
    (a GPU trial's workers each take their GPUs and train on them: ``use_gpu``)."""
    gpus = trial.gpus_per_worker
    return {
        "num_workers": trial.workers,
        "use_gpu": gpus > 0,
        "resources_per_worker": {"CPU": trial.cpus_per_worker, **({"GPU": gpus} if gpus > 0 else {})},
    }


def torch_trainer(
    worker: Any, loop_config: dict[str, Any], runtime: dict[str, Any], trial_id: str, reports: Any, **extra: Any
) -> Any:
    """A trial's TorchTrainer: ``hpo.trial.workers`` workers running ``worker``, its
    folders on the cluster's scratch, each report to ``reports`` (``forwarder``); ``extra``:
    its datasets."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    return TorchTrainer(
        worker,
        train_loop_config=loop_config,
        scaling_config=ScalingConfig(**trial_scaling(runtime["hpo"].trial)),
        run_config=RunConfig(
            name=f"{trial_id}-{uuid.uuid4().hex[:8]}",
            storage_path=tempfile.mkdtemp(prefix="train-", dir=runtime["scratch"]),
            callbacks=[forwarder(reports)],
            failure_config=FailureConfig(max_failures=0),
            checkpoint_config=CheckpointConfig(num_to_keep=KEEP),
        ),
        **extra,
    )


def forwarded(trainer: Any, reports: Any, trial_id: str) -> Any:
    """``trainer.fit()`` in a thread of the Tune trial, yielding each report the
    ``forwarder`` passes on (rank 0's metrics, the gathered checkpoint folder or None) as
    it comes; the run's error, if any, raised once every report is out."""
    failed: list[BaseException] = []

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as exc:  # raised in the trial's own thread below
            failed.append(exc)
        finally:
            reports.put(None)

    runner = threading.Thread(target=fit, name=f"{trial_id}-train", daemon=True)
    runner.start()
    while (item := reports.get()) is not None:
        yield item
    runner.join()
    if failed:
        raise failed[0]
