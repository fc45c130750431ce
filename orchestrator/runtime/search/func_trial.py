"""A trial of a search over a Ray Train function (``job.train_func``).

The user's function runs unchanged on ``hpo.trial.workers`` Ray Train workers (a
TorchTrainer inside the Tune trial, as a multi-worker trial of a workload class runs,
orchestrator.runtime.search.train_trial), with ``config`` = the run's ``job.params`` and
the trial's values at their ``job.params.<key>`` paths. What the search sees of it:

- an iteration is a report: the function's own ``ray.train.report`` calls, counted on
  from the checkpoint the trial goes on from. ``hpo.max_t`` caps them (ASHA's top rung,
  the end of a FIFO trial); a function that makes fewer ends its trial when it returns;
- the metrics are the numbers a report carries (rank 0's); ``hpo.metric`` must be one
  of them, or the trial fails naming it;
- a report's checkpoint (every rank's folder, gathered by Ray Train as for any
  TorchTrainer) is the trial's checkpoint: in Tune's folder and the search's snapshot as
  FUNC_FILES + each file's path, beside FUNC_STATE (the reports it stands after);
- ``ray.train.get_checkpoint()`` returns the checkpoint the trial goes on from (Tune's,
  when the trial is retried within an attempt; the snapshot's, after a failover), written
  to a local folder on every rank, or None for a trial that starts. The files are the
  function's own, handed back as they were reported (the snapshot that carries them is a
  signed checkpoint, verified before it is read); this module never opens them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.hpo import trial_key
from orchestrator.runtime.search.snapshot import FUNC_FILES, FUNC_STATE, METRICS_KEY, func_files, func_iteration
from orchestrator.runtime.search.train_trial import forwarded, torch_trainer
from orchestrator.runtime.search.trial import INDEX, VALUES, announce, eval_metrics, resumed_parts, trial_sections
from recovery.manifest import checkpoint_digest
from recovery.store import sha256_hex


class TrialSink:
    """A function trial's ``ray.train`` report and get_checkpoint, on one worker: the
    report goes on to Ray Train with its checkpoint (the forwarder takes it from there);
    get_checkpoint is the folder the trial goes on from."""

    def __init__(self, restored: str | None) -> None:
        self.restored = restored

    def get_checkpoint(self) -> Any:
        if self.restored is None:
            return None
        from ray.train import Checkpoint

        return Checkpoint.from_directory(self.restored)

    def report(self, metrics: dict[str, Any], checkpoint: Any, delete_local: bool) -> Any:
        return checkpoint  # Ray Train's own report persists it, gathered from every rank


def func_worker(config: dict[str, Any]) -> None:
    """One rank of a function trial (a Ray Train worker): the user's function, its
    checkpoint to go on from in a local folder."""
    import ray

    from orchestrator.runtime.checkpoint.scratch import write_files
    from orchestrator.runtime.loop.func_mode import call_user_function, routed_through
    from orchestrator.workloads import train_function

    fn = train_function(config["train_func"])
    restored = None
    if config["files"] is not None:
        restored = tempfile.mkdtemp(prefix="trial-restore-", dir=config["scratch"])
        write_files(ray.get(config["files"]), restored)
    try:
        with routed_through(TrialSink(restored)):
            call_user_function(fn, dict(config["params"]))
    finally:
        if restored is not None:
            shutil.rmtree(restored, ignore_errors=True)


def func_report(metrics: dict[str, Any], wanted: str, iteration: int, digest: str | None) -> dict[str, Any]:
    """What a function's report gives Tune: its numbers (top level, for the scheduler, and
    together), the iteration and the digest of the trial's newest checkpoint (None before
    its first); UserCodeError when the search's metric is not among the numbers."""
    numbers = eval_metrics(metrics, wanted, source="the train function's report")
    return {
        **numbers,
        METRICS_KEY: numbers,
        "iteration": iteration,
        "weights_sha256": None,
        "checkpoint_sha256": digest,
    }


def folder_digest_of(files: dict[str, bytes]) -> str:
    """The digest of a checkpoint folder held as bytes by path: checkpoint_digest of each
    file's sha256, as a function's run names its checkpoint."""
    return checkpoint_digest({name: sha256_hex(data) for name, data in files.items()})


def write_func_checkpoint(folder: str, iteration: int, into: str) -> str:
    """Tune's checkpoint of a function trial in ``into``: the reported ``folder``'s files
    under FUNC_FILES (each read once, hashed as it is copied), and FUNC_STATE; the
    folder's digest (as folder_digest_of gives it)."""
    digests = {}
    for path in sorted(Path(folder).rglob("*")):
        if not path.is_file():
            continue
        name = path.relative_to(folder).as_posix()
        out = Path(into, FUNC_FILES, *name.split("/"))
        out.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        with open(path, "rb") as src, open(out, "wb") as dst:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                dst.write(block)
        digests[name] = h.hexdigest()
    Path(into, FUNC_STATE).write_text(json.dumps({"iteration": iteration}))
    return checkpoint_digest(digests)


def func_trial(config: dict[str, Any], runtime: dict[str, Any], resume: dict[str, dict[str, bytes]]) -> None:
    """The Tune trial of a function trial: its Ray Train run, each report on to Tune."""
    import ray
    from ray import tune
    from ray.util.queue import Queue

    index = int(config[INDEX])
    values = config.get(VALUES) or runtime["configs"][index]
    trial_id = trial_key(index)
    hpo = runtime["hpo"]
    parts = resumed_parts(trial_id, resume)
    start = 0 if parts is None else func_iteration(parts)
    announce(runtime, trial_id, values, None if parts is None else start, workers=hpo.trial.workers)
    job, _, _ = trial_sections(runtime, values)
    reports: Any = Queue(actor_options={"num_cpus": 0})
    loop_config = {
        "train_func": job.train_func,
        "params": dict(job.params),
        "files": None if parts is None else ray.put(func_files(parts)),
        "scratch": runtime["scratch"],
    }
    trainer = torch_trainer(func_worker, loop_config, runtime, trial_id, reports)
    iteration = start
    digest = None if parts is None else folder_digest_of(func_files(parts))
    for metrics, folder in forwarded(trainer, reports, trial_id):
        iteration += 1
        if folder is None:
            tune.report(func_report(metrics, hpo.metric, iteration, digest))
            continue
        with tempfile.TemporaryDirectory(prefix="trial-ckpt-", dir=runtime["scratch"]) as d:
            digest = write_func_checkpoint(folder, iteration, d)
            payload = func_report(metrics, hpo.metric, iteration, digest)
            tune.report(payload, checkpoint=tune.Checkpoint.from_directory(d))
