"""A Ray Tune search as an attempt's workload, resumable in another region.

Where the experiment lives: Tune keeps its experiment directory on the cluster's
local scratch (``storage_path`` a local folder), and this driver snapshots it
into the region's CheckpointStore as an ordinary checkpoint: one
``experiment.tar`` (the experiment state, the searcher's state and every trial's
kept checkpoints) under a manifest with its sha256, at step = the search step
(see ``orchestrator/hpo.py``). So replication, verification, retention and
fencing apply to a search unchanged, which pointing Tune's ``storage_path`` at
the store would not give: Tune writes its state and trial checkpoints as many
separate files with no commit marker, no checksum and no generation check, so a
region lost mid-write would leave a half-written experiment that nothing could
tell from a whole one, and a zombie driver could overwrite the new attempt's.

Consistency of a snapshot: Tune saves its experiment state (to the driver's
staging folder) at the end of a controller step, throttled to
``TUNE_GLOBAL_CHECKPOINT_S`` = ``hpo.snapshot_interval_s``; ``on_step_end``
runs right after, in the same thread, and snapshots only when a save has just
happened. Trial checkpoints Tune has not yet registered (a trial persisted one
but its result is not processed) are left out: the state does not name them.

Restore: the newest snapshot that verifies on the controller's lineage (narrowed
by the stores' fence) is
downloaded, unpacked to scratch and handed to ``Tuner.restore`` with
``resume_unfinished=True`` and ``resume_errored`` / ``restart_errored`` from the
recovery config. Finished trials stay finished; unfinished ones continue from
their newest checkpoint (each trial reports the iteration it restored).

Trust: a snapshot is an ordinary checkpoint, so its manifest is signed with the run's
key (recovery/signing.py) and restore takes only one that verifies: nothing in a
snapshot (Tune's tuner.pkl, the trials' checkpoints, scheduler_state.pkl, all of
which Tune or we unpickle) is unpacked unless this run wrote it. Unpickling itself
stays: Tune's own restore needs it.
"""

from __future__ import annotations

import glob
import io
import os
import random
import shutil
import tarfile
import tempfile
import time
from typing import Any

import numpy as np
import torch
from ray import tune
from ray.tune.schedulers import ASHAScheduler

from orchestrator.hpo import (
    ERROR,
    TERMINATED,
    TrialRecord,
    asha_rungs,
    best_of,
    counts,
    max_search_steps,
    param_space,
    search_step,
)
from orchestrator.runtime import runkey
from orchestrator.runtime.checkpointer import AsyncCheckpointer
from orchestrator.runtime.control import ControlChannel
from orchestrator.runtime.spec import RuntimeSpec
from orchestrator.runtime.telemetry import Sampler, summary
from orchestrator.runtime.weights import weights_sha256
from orchestrator.runtime.worker import restore_rule, spec_stores
from orchestrator.triggers import exhausted, in_region
from recovery.detection import EXIT_INFRA, EXIT_OK, EXIT_USER_ERROR
from recovery.fencing import FencedError
from recovery.manifest import Manifest
from recovery.replication import sync_newest
from recovery.store import CheckpointStore

EXPERIMENT = "search"
ARCHIVE = "experiment.tar"
SCHEDULER_STATE = "scheduler_state.pkl"
STATE_PREFIX = "experiment_state-"
PROGRESS_EVERY_S = 0.5
CHAOS_WAIT_S = 60.0
STANDBY_POLL_S = 0.05
# Trial checkpoints Tune keeps (the newest is the one a trial resumes from).
KEEP_TRIAL_CHECKPOINTS = 2


# --- the trial ---------------------------------------------------------------------------------


def trial_func(config: dict[str, Any], runtime: dict[str, Any]) -> None:
    """One trial: the job's workload trained in-process (one worker), an evaluation and a
    checkpoint every ``steps_per_iteration`` steps, resumed from Tune's checkpoint if any."""
    from orchestrator.workloads import make_workload

    hpo = runtime["hpo"]
    job = {**runtime["job"], **{k: config[k] for k in hpo["search_space"]}}
    trial_id = tune.get_context().get_trial_id()
    control = ControlChannel(runtime["control_url"], runtime.get("control_options"))
    gen = int(runtime["generation"])
    torch.set_num_threads(1)
    seed = int(job["seed"])
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    workload = make_workload(job, runtime["data"])
    model = workload.model()
    optimizer = workload.optimizer(model)
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            model.load_state_dict(torch.load(os.path.join(d, "model.pt"), weights_only=True))
            optimizer.load_state_dict(torch.load(os.path.join(d, "optimizer.pt"), weights_only=True))
            state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        start = int(state["iteration"])
        control.event(gen, "trial_restored", trial_id=trial_id, iteration=start, pid=os.getpid())
    else:
        control.event(gen, "trial_started", trial_id=trial_id, config={k: job[k] for k in hpo["search_space"]})
    spi = int(hpo["steps_per_iteration"])
    sampler = Sampler(rank=0).start()
    try:
        for it in range(start + 1, int(hpo["max_t"]) + 1):
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


# --- the driver --------------------------------------------------------------------------------


def _record(trial: Any) -> TrialRecord:
    last = trial.last_result or {}
    ckpt_it: int | None = None
    latest = getattr(getattr(trial.run_metadata, "checkpoint_manager", None), "latest_checkpoint_result", None)
    if latest is not None and latest.metrics:
        ckpt_it = int(latest.metrics.get("iteration", 0)) or None
    error = None
    if trial.status == ERROR:
        error = str(getattr(trial, "error_file", None) or "errored")
    return TrialRecord(
        trial_id=str(trial.trial_id),
        status=str(trial.status),
        iteration=int(last.get("iteration", 0) or 0),
        config={k: trial.config[k] for k in trial.config if not k.startswith("__")},
        metrics={k: float(last[k]) for k in ("accuracy", "eval_loss") if k in last},
        checkpoint_iteration=ckpt_it,
        error=error,
    )


def _kept_checkpoints(trial: Any) -> set[str] | None:
    """The checkpoint folders Tune's state names for ``trial``; None: not knowable, keep all."""
    manager = getattr(trial.run_metadata, "checkpoint_manager", None)
    results = getattr(manager, "best_checkpoint_results", None)
    if results is None:
        return None
    return {os.path.normpath(r.checkpoint.path) for r in results}


def pack_experiment(exp_dir: str, staging_dir: str, trials: list[Any], extra: dict[str, bytes] | None = None) -> bytes:
    """The experiment as one tar: the folder on scratch, without trial checkpoints the state
    does not name, and with the state just saved in the driver's staging folder."""
    kept: set[str] = set()
    keep_all = False
    for t in trials:
        names = _kept_checkpoints(t)
        if names is None:
            keep_all = True
        else:
            kept |= names
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for root, dirs, files in os.walk(exp_dir):
            dirs.sort()
            rel_root = os.path.relpath(root, exp_dir)
            if rel_root == ".":
                # The staging folder has the current state; older sessions' state files would compete.
                files = [f for f in files if not f.startswith(STATE_PREFIX)]
            for d in list(dirs):
                full = os.path.normpath(os.path.join(root, d))
                if d.startswith("checkpoint_") and not keep_all and full not in kept:
                    dirs.remove(d)
            for name in sorted(files):
                _add(tar, os.path.join(root, name), os.path.normpath(os.path.join(rel_root, name)))
        for name in sorted(os.listdir(staging_dir)):
            path = os.path.join(staging_dir, name)
            if os.path.isfile(path):
                _add(tar, path, name)
        for name, data in sorted((extra or {}).items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _add(tar: tarfile.TarFile, path: str, arcname: str) -> None:
    """One file as read now: trials write next to us (a file can grow or go while we read)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return
    info = tarfile.TarInfo(arcname)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
    tar.addfile(info, io.BytesIO(data))


def unpack_experiment(data: bytes, exp_dir: str) -> None:
    if os.path.exists(exp_dir):
        shutil.rmtree(exp_dir)
    os.makedirs(exp_dir)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(exp_dir, filter="data")  # refuses absolute paths, '..', links out


class DurableASHA(ASHAScheduler):
    """ASHA whose rungs travel in the experiment snapshot. Tune saves no scheduler state
    with an experiment: a restored ASHA would start with empty rungs, let trials through
    that it had already ranked, and stop others at iterations that are not rungs (it
    records a trial at a rung the first time it sees the trial past it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _SCHEDULERS.append(self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled from the experiment's tuner.pkl by Tuner.restore: this is the one fit() uses.
        self.__dict__.update(state)
        _SCHEDULERS.append(self)

    def restore_rungs(self, path: str) -> None:
        """The saved rungs and brackets; metric and mode stay unset, as Tune sets them in fit()."""
        keep = {k: self.__dict__.get(k) for k in ("_metric", "_mode", "_metric_op")}
        self.restore(path)
        self.__dict__.update(keep)

    def state_bytes(self) -> bytes:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, SCHEDULER_STATE)
            self.save(path)
            with open(path, "rb") as fh:
                return fh.read()


_SCHEDULERS: list[DurableASHA] = []


class SearchCallback(tune.Callback):
    """Hands Tune's events to this process's SearchDriver. Stateless on purpose: Tune pickles
    its RunConfig (callbacks included) into the experiment, and a restored experiment's
    callback must reach the driver of the attempt that restored it."""

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict, **info: Any) -> None:
        _driver().changed(trials)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        _driver().changed(trials)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        _driver().changed(trials)

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        _driver().maybe_snapshot(trials)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        _driver().snapshot(trials, final=True)


_DRIVERS: list[SearchDriver] = []


def _driver() -> SearchDriver:
    return _DRIVERS[-1]


class SearchDriver:
    """Snapshots the experiment, reports progress and meets chaos faults (through SearchCallback)."""

    def __init__(self, spec: RuntimeSpec, control: ControlChannel, restored_step: int, restored_url: str | None):
        self.spec, self.control, self.gen = spec, control, spec.generation
        self.hpo: dict[str, Any] = dict(spec.hpo or {})
        stores = spec_stores(spec, runkey.require())
        self.stores = stores
        self.checkpointer = AsyncCheckpointer(
            stores,
            spec.run_id,
            spec.generation,
            int(spec.checkpoint["keep_last"]),
            outage_s=spec.store_outage_s,
            on_event=lambda type_, fields: control.event(spec.generation, type_, **fields),
            replicate=True,
            lineage=spec.fencing_lineage(),
        )
        self.restored_step, self.restored_url = restored_step, restored_url
        self.total = max_search_steps(int(self.hpo["num_samples"]), int(self.hpo["max_t"]))
        self.last_snapshot_step = restored_step
        self.state_mtime = 0
        self.dirty = False
        self.t0 = time.time()
        self.last_report = 0.0
        self.step = restored_step
        self.snapshots = 0

    @property
    def last_checkpoint(self) -> str | None:
        return self.checkpointer.committed_url or self.restored_url

    # --- progress and chaos ---------------------------------------------------------------
    def changed(self, trials: list[Any]) -> None:
        self.dirty = True
        records = [_record(t) for t in trials]
        self.step = max(self.step, search_step(records))
        self.report(trials, records)
        self.chaos(self.step)

    def report(self, trials: list[Any], records: list[TrialRecord], force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last_report < PROGRESS_EVERY_S:
            return
        self.last_report = now
        best = best_of(records, self.hpo["metric"], self.hpo["mode"])
        workers = []
        for t in trials:
            tele = (t.last_result or {}).get("telemetry")
            if t.status == "RUNNING" and isinstance(tele, dict):
                workers.append({**tele, "rank": len(workers), "trial_id": str(t.trial_id)})
        self.control.progress(
            self.gen,
            step=self.step,
            total=self.total,
            steps_per_s=(self.step - self.restored_step) / max(now - self.t0, 1e-9),
            last_checkpoint=self.last_checkpoint,
            restored_step=self.restored_step,
            trials=counts(records),
            best=None
            if best is None
            else {"metric": self.hpo["metric"], "value": best.metrics[self.hpo["metric"]], "trial_id": best.trial_id},
            telemetry=summary(workers) if workers else None,
        )

    def chaos(self, step: int) -> None:
        """Faults name a search step: met here, in the driver, as the train loop meets a step."""
        for i, fault in enumerate(self.spec.faults):
            at = fault.get("at_step")
            if at is None or step < int(at):
                continue
            if not in_region(fault, self.spec.region) or exhausted(fault, self.control.fired_count(i)):
                continue
            self.checkpointer.wait()  # land at a quiescent point, as training runs do
            seq = self.control.fired_count(i) + 1
            self.control.chaos_request(
                i, seq=seq, kind=fault["kind"], step=step, rank=0, pid=os.getpid(), generation=self.gen
            )
            deadline = time.time() + CHAOS_WAIT_S
            while time.time() < deadline and self.control.fired_count(i) < seq:
                time.sleep(0.05)

    # --- snapshots ------------------------------------------------------------------------
    def _state_mtime(self, trials: list[Any]) -> int:
        staging = trials[0].storage.experiment_driver_staging_path
        states = glob.glob(os.path.join(staging, STATE_PREFIX + "*.json"))
        return max((os.stat(p).st_mtime_ns for p in states), default=0)

    def maybe_snapshot(self, trials: list[Any]) -> None:
        if not self.dirty or not trials:
            return
        mtime = self._state_mtime(trials)
        if mtime <= self.state_mtime:
            return  # Tune has not saved its state since: a snapshot now would not name the news
        self.snapshot(trials)

    def snapshot(self, trials: list[Any], final: bool = False) -> None:
        if not trials:
            return
        records = [_record(t) for t in trials]
        step = search_step(records)
        self.step = max(self.step, step)
        if step <= self.last_snapshot_step:
            return  # nothing new since the last one (or since the restored one)
        self.state_mtime = self._state_mtime(trials)
        storage = trials[0].storage
        extra = {SCHEDULER_STATE: _SCHEDULERS[-1].state_bytes()} if _SCHEDULERS else {}
        data = pack_experiment(storage.experiment_fs_path, storage.experiment_driver_staging_path, trials, extra)
        self.checkpointer.submit(
            step,
            {ARCHIVE: data},
            extra={"kind": "hpo_experiment", "search_step": step, "trials": [r.to_json() for r in records]},
        )
        self.last_snapshot_step = step
        self.dirty = False
        self.snapshots += 1
        if final:
            self.checkpointer.wait()
        self.report(trials, records, force=True)


def _restore(spec: RuntimeSpec, control: ControlChannel, exp_dir: str) -> tuple[int, str | None]:
    """Unpack the newest verified snapshot to ``exp_dir``; (its step, its URL), or (0, None)."""
    stores = spec_stores(spec, runkey.require())

    def skipped(store: CheckpointStore, step: int, reason: str) -> None:
        control.event(spec.generation, "checkpoint_skipped", step=step, reason=reason, region=store.region)

    def store_failed(store: CheckpointStore, error: str) -> None:
        control.event(spec.generation, "restore_store_skipped", region=store.region, error=error[:500])

    lineage, usable = restore_rule(spec, control, stores)
    best = sync_newest(spec.run_id, usable, skipped, lineage=lineage, on_store_error=store_failed)
    if best is None:
        return 0, None
    store, manifest = best
    m: Manifest = manifest
    unpack_experiment(store.read(m, ARCHIVE), exp_dir)
    return m.step, store.checkpoint_url(spec.run_id, m.step)


def _tuner(spec: RuntimeSpec, driver: SearchDriver, scratch: str, restore_from: str | None) -> Any:
    from ray.tune.schedulers import FIFOScheduler
    from ray.tune.search import BasicVariantGenerator

    hpo = driver.hpo
    runtime = {
        "hpo": hpo,
        "job": spec.job,
        "data": spec.data,
        "control_url": spec.control_url,
        "control_options": spec.control_options,
        "generation": spec.generation,
    }
    trainable = tune.with_resources(
        tune.with_parameters(trial_func, runtime=runtime), {"cpu": float(hpo["cpus_per_trial"])}
    )
    if restore_from is not None:
        return tune.Tuner.restore(
            restore_from,
            trainable=trainable,
            resume_unfinished=True,
            resume_errored=bool(hpo["resume_errored"]),
            restart_errored=bool(hpo["restart_errored"]),
        )
    scheduler: Any
    if hpo["scheduler"] == "asha":
        scheduler = DurableASHA(
            time_attr="iteration",
            max_t=int(hpo["max_t"]),
            grace_period=int(hpo["grace_period"]),
            reduction_factor=int(hpo["reduction_factor"]),
        )
    else:
        scheduler = FIFOScheduler()
    return tune.Tuner(
        trainable,
        param_space=param_space(hpo["search_space"]),
        tune_config=tune.TuneConfig(
            metric=hpo["metric"],
            mode=hpo["mode"],
            num_samples=int(hpo["num_samples"]),
            max_concurrent_trials=int(hpo["max_concurrent"]),
            scheduler=scheduler,
            search_alg=BasicVariantGenerator(random_state=int(spec.job["seed"])),
        ),
        run_config=tune.RunConfig(
            name=EXPERIMENT,
            storage_path=scratch,
            callbacks=[SearchCallback()],
            failure_config=tune.FailureConfig(max_failures=int(spec.trainer["max_worker_restarts"])),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=KEEP_TRIAL_CHECKPOINTS),
            verbose=0,
        ),
    )


def run_search(spec: RuntimeSpec, control: ControlChannel) -> int:
    """The search, from the newest snapshot if there is one; an exit code for the controller."""
    hpo = dict(spec.hpo or {})
    # Read by Tune's controller when the Tuner starts: how often it saves the experiment state.
    os.environ["TUNE_GLOBAL_CHECKPOINT_S"] = str(float(hpo["snapshot_interval_s"]))
    # Tune's CSV/JSON/TensorBoard loggers: our records are the snapshots and the control channel.
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    if spec.standby:
        control.event(spec.generation, "workers_ready", pid=os.getpid(), standby=True)
        while not control.is_active(spec.generation):
            time.sleep(STANDBY_POLL_S)
    scratch = os.path.join(spec.ray_storage_path, "tune")
    exp_dir = os.path.join(scratch, EXPERIMENT)
    restored_step, restored_url = _restore(spec, control, exp_dir)
    control.event(
        spec.generation, "train_started", restored_step=restored_step, restored_from=restored_url, pid=os.getpid()
    )
    driver = SearchDriver(spec, control, restored_step, restored_url)
    _DRIVERS.append(driver)
    tuner = _tuner(spec, driver, scratch, exp_dir if restored_url else None)
    saved = os.path.join(exp_dir, SCHEDULER_STATE)
    if restored_url and _SCHEDULERS and os.path.exists(saved):
        _SCHEDULERS[-1].restore_rungs(saved)  # the rungs as they were at the snapshot
    try:
        results = tuner.fit()
    except FencedError:
        return EXIT_INFRA
    except Exception as exc:
        control.event(spec.generation, "runtime_error", error=f"{type(exc).__name__}: {exc}"[:1000])
        return EXIT_INFRA
    return _finish(spec, control, driver, results)


def _finish(spec: RuntimeSpec, control: ControlChannel, driver: SearchDriver, results: Any) -> int:
    hpo = driver.hpo
    records: list[TrialRecord] = []
    for r in results:
        m = r.metrics or {}
        records.append(
            TrialRecord(
                trial_id=str(m.get("trial_id", "?")),
                status=ERROR if r.error is not None else TERMINATED,
                iteration=int(m.get("iteration", 0) or 0),
                config={k: v for k, v in (r.config or {}).items() if k in hpo["search_space"]},
                metrics={k: float(m[k]) for k in ("accuracy", "eval_loss") if k in m},
                checkpoint_iteration=int(m.get("iteration", 0) or 0) if r.checkpoint is not None else None,
                error=None if r.error is None else f"{type(r.error).__name__}: {str(r.error)[:300]}",
            )
        )
    records.sort(key=lambda t: t.trial_id)
    try:
        driver.checkpointer.wait()
    except Exception as exc:
        control.event(spec.generation, "runtime_error", error=f"final snapshot not committed: {exc}"[:1000])
        return EXIT_INFRA
    best = best_of(records, hpo["metric"], hpo["mode"])
    if best is None:
        control.event(spec.generation, "user_error", rank=0, error="every trial of the search errored")
        return EXIT_USER_ERROR
    best_result = next(r for r in results if (r.metrics or {}).get("trial_id") == best.trial_id)
    workers = [
        {**(r.metrics or {}).get("telemetry", {}), "rank": i, "trial_id": (r.metrics or {}).get("trial_id")}
        for i, r in enumerate(results)
        if isinstance((r.metrics or {}).get("telemetry"), dict)
    ]
    step = search_step(records)
    control.progress(spec.generation, step=step, total=driver.total, last_checkpoint=driver.last_checkpoint)
    control.final(
        spec.generation,
        final_step=step,
        metrics=dict(best.metrics),
        weights_sha256=(best_result.metrics or {}).get("weights_sha256"),
        final_checkpoint=driver.last_checkpoint,
        best_trial={
            **best.to_json(),
            "metric": hpo["metric"],
            "mode": hpo["mode"],
            "value": best.metrics[hpo["metric"]],
        },
        trials=[r.to_json() for r in records],
        search={
            "scheduler": hpo["scheduler"],
            "max_t": int(hpo["max_t"]),
            "rungs": asha_rungs(int(hpo["max_t"]), int(hpo["grace_period"]), int(hpo["reduction_factor"]))
            if hpo["scheduler"] == "asha"
            else [],
            "snapshots": driver.snapshots,
        },
        telemetry=summary(workers) if workers else None,
    )
    return EXIT_OK
