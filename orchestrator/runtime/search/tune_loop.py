"""A Ray Tune search as an attempt's workload, resumable in another region.

Trials: the search's trials are listed up front from the run's config
(hpo.sample_configs), so that a trial is the same trial, with the same id
(``trial_00003``) and values, in every attempt. Tune runs them as a grid over
their indexes; a trial looks its values up by index.

Where the experiment lives: Tune keeps its experiment folder on the cluster's
local scratch, and this driver snapshots the search into the region's
CheckpointStore as an ordinary checkpoint at step = the search step (see
``orchestrator/hpo.py``): one ``experiment.tar`` of plain data (see
``search_snapshot.py``: every trial's record, ASHA's rungs, and the newest
checkpoint of each trial that may still run, as tensors). So replication,
verification, retention and fencing apply to a search unchanged, which pointing
Tune's ``storage_path`` at the store would not give: Tune writes its state and trial
checkpoints as many separate files with no commit marker, no checksum and no
generation check.

Consistency of a snapshot: it is taken in Tune's controller thread at the end of a
step (``on_step_end``), when every result of the step has been processed: the
records, the rungs and the checkpoints Tune has registered agree. A trial whose
newest result has no registered checkpoint yet resumes from its previous one.
Snapshots are at least ``hpo.snapshot_interval_s`` apart, and one is taken at the end.

Restore: the newest snapshot that verifies on the controller's lineage (narrowed by
the stores' fence) is read and checked (search_snapshot.unpack); nothing in it is
unpickled, and Tune's own pickled experiment never leaves the cluster. The attempt
starts a new Tune experiment over the trials that remain (search_snapshot.resume_plan):
finished trials stay finished, unfinished ones continue from their checkpoint (each
reports the iteration it restored), errored ones as ``recovery.resume_errored`` /
``restart_errored`` say. ASHA's recorded values are restored as data (AshaRungs).
"""

from __future__ import annotations

import io
import os
import random
import tempfile
import time
from typing import Any

import numpy as np
import torch
from ray import tune
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from orchestrator.hpo import (
    ERROR,
    TERMINATED,
    AshaRungs,
    TrialRecord,
    asha_rungs,
    best_of,
    counts,
    max_search_steps,
    sample_configs,
    search_step,
    trial_key,
)
from orchestrator.runtime import rendezvous
from orchestrator.runtime.checkpoint.checkpointer import AsyncCheckpointer
from orchestrator.runtime.search.snapshot import (
    CHECKPOINT_FILES,
    ResumePlan,
    SearchSnapshot,
    SnapshotError,
    pack,
    resume_plan,
    rungs_from,
    unpack,
)
from orchestrator.runtime.telemetry import Sampler, summary
from orchestrator.runtime.weights import weights_sha256
from orchestrator.runtime.worker import restore_rule, spec_stores
from orchestrator.wire import runkey
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.sections import HpoSection, JobSection
from orchestrator.wire.spec import RuntimeSpec
from recovery.detection import EXIT_INFRA, EXIT_OK, EXIT_USER_ERROR
from recovery.fencing import FencedError
from recovery.replication import load_newest
from recovery.store import CheckpointStore

EXPERIMENT = "search"
ARCHIVE = "experiment.tar"
# The one key of a Tune trial's config: the trial's index in hpo.sample_configs.
INDEX = "trial_index"
PROGRESS_EVERY_S = 0.5
REGION_FAULT_LANDS_S = 10.0
STANDBY_POLL_S = 0.05
# Trial checkpoints Tune keeps (the newest is the one a trial resumes from).
KEEP_TRIAL_CHECKPOINTS = 2


def search_of(spec: RuntimeSpec) -> HpoSection:
    """The spec's hpo section: a search has one (the driver starts a search only then)."""
    if spec.hpo is None:
        raise ValueError("runtime spec: hpo: missing; a search needs it")
    return spec.hpo


# --- the trial ---------------------------------------------------------------------------------


def _load(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=True)


def trial_func(config: dict[str, Any], runtime: dict[str, Any], resume: dict[str, dict[str, bytes]]) -> None:
    """One trial: the job's workload trained in-process (one worker), an evaluation and a
    checkpoint every ``steps_per_iteration`` steps; it goes on from Tune's checkpoint (a
    retry within this attempt) or else from the snapshot's (``resume``), if any."""
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
            parts = {}
            for name in CHECKPOINT_FILES:
                with open(os.path.join(d, name), "rb") as fh:
                    parts[name] = fh.read()
    start = 0
    if parts is not None:
        model.load_state_dict(_load(parts["model.pt"]))
        optimizer.load_state_dict(_load(parts["optimizer.pt"]))
        start = int(_load(parts["state.pt"])["iteration"])
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


# --- the scheduler -----------------------------------------------------------------------------


class StableASHA(FIFOScheduler):
    """Tune's ASHA rule over AshaRungs: its state is data keyed by our trial ids, so it
    travels in a snapshot as JSON and a resumed search meets the rungs as they were."""

    def __init__(self, rungs: AshaRungs, metric: str, max_t: int) -> None:
        super().__init__()
        self.rungs, self.search_metric, self.max_t = rungs, metric, max_t

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True  # metric and mode come from the run's config, with the rungs

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if "iteration" not in result or self.search_metric not in result:
            return TrialScheduler.CONTINUE
        if int(result["iteration"]) >= self.max_t:
            return TrialScheduler.STOP
        stop = self.rungs.on_result(_trial_id(trial), int(result["iteration"]), float(result[self.search_metric]))
        return TrialScheduler.STOP if stop else TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        if result and "iteration" in result and self.search_metric in result:
            self.rungs.on_result(_trial_id(trial), int(result["iteration"]), float(result[self.search_metric]))


def _trial_id(trial: Any) -> str:
    return trial_key(int(trial.config[INDEX]))


# --- the driver --------------------------------------------------------------------------------


def _latest_checkpoint(trial: Any) -> Any:
    manager = getattr(trial.run_metadata, "checkpoint_manager", None)
    return getattr(manager, "latest_checkpoint_result", None)


def _record(trial: Any, configs: list[dict[str, Any]], restored: dict[str, TrialRecord]) -> TrialRecord:
    """A live trial's record; until it reports, what the snapshot said of it (its status live)."""
    trial_id = _trial_id(trial)
    last = trial.last_result or {}
    before = restored.get(trial_id)
    ckpt_it: int | None = None
    latest = _latest_checkpoint(trial)
    if latest is not None and latest.metrics:
        ckpt_it = int(latest.metrics.get("iteration", 0)) or None
    if ckpt_it is None and before is not None:
        ckpt_it = before.checkpoint_iteration
    error = None
    if trial.status == ERROR:
        error = str(getattr(trial, "error_file", None) or "errored")[:2000]
    if not last.get("iteration") and before is not None:
        return TrialRecord(**{**before.to_json(), "status": str(trial.status), "checkpoint_iteration": ckpt_it})
    sha = last.get("weights_sha256")
    return TrialRecord(
        trial_id=trial_id,
        status=str(trial.status),
        iteration=int(last.get("iteration", 0) or 0),
        config=dict(configs[int(trial.config[INDEX])]),
        metrics={k: float(last[k]) for k in ("accuracy", "eval_loss") if k in last},
        checkpoint_iteration=ckpt_it,
        error=error,
        weights_sha256=sha if isinstance(sha, str) else None,
    )


class SearchCallback(tune.Callback):
    """Hands Tune's events to this process's SearchDriver. Stateless on purpose: Tune pickles
    its RunConfig (callbacks included) into its experiment folder on scratch."""

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
    """Snapshots the search, reports progress and meets chaos faults (through SearchCallback)."""

    def __init__(
        self,
        spec: RuntimeSpec,
        control: ControlChannel,
        restored_step: int,
        restored_url: str | None,
        configs: list[dict[str, Any]],
        plan: ResumePlan,
        rungs: AshaRungs | None,
    ):
        self.spec, self.control, self.gen = spec, control, spec.generation
        self.hpo = search_of(spec)
        self.configs, self.plan, self.rungs = configs, plan, rungs
        self.checkpointer = AsyncCheckpointer(
            spec_stores(spec, runkey.require()),
            spec.run_id,
            spec.generation,
            spec.checkpoint.keep_last,
            outage_s=spec.store_outage_s,
            on_event=lambda type_, fields: control.event(spec.generation, type_, **fields),
            replicate=True,
            lineage=spec.fencing_lineage(),
        )
        self.restored_step, self.restored_url = restored_step, restored_url
        self.total = max_search_steps(len(configs), self.hpo.max_t)
        self.last_snapshot_step = restored_step
        self.last_snapshot_t = 0.0
        self.dirty = False
        self.t0 = time.time()
        self.last_report = 0.0
        self.step = restored_step
        self.snapshots = 0

    @property
    def last_checkpoint(self) -> str | None:
        return self.checkpointer.committed_url or self.restored_url

    def records(self, trials: list[Any]) -> list[TrialRecord]:
        """Every trial of the search: the carried ones as the snapshot had them, the rest live."""
        merged = {r.trial_id: r for r in self.plan.carried}
        for t in trials:
            merged[_trial_id(t)] = _record(t, self.configs, self.plan.restored)
        return [merged[k] for k in sorted(merged)]

    # --- progress and chaos ---------------------------------------------------------------
    def changed(self, trials: list[Any]) -> None:
        self.dirty = True
        records = self.records(trials)
        self.step = max(self.step, search_step(records))
        self.report(trials, records)
        self.chaos(self.step)

    def report(self, trials: list[Any], records: list[TrialRecord], force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last_report < PROGRESS_EVERY_S:
            return
        self.last_report = now
        best = best_of(records, self.hpo.metric, self.hpo.mode)
        workers = []
        for t in trials:
            tele = (t.last_result or {}).get("telemetry")
            if t.status == "RUNNING" and isinstance(tele, dict):
                workers.append({**tele, "rank": len(workers), "trial_id": _trial_id(t)})
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
            else {"metric": self.hpo.metric, "value": best.metrics[self.hpo.metric], "trial_id": best.trial_id},
            telemetry=summary(workers) if workers else None,
        )

    def chaos(self, step: int) -> None:
        """Faults name a search step: met here, in the driver, as the train loop meets a step."""
        for i, fault in enumerate(self.spec.faults):
            if fault.at_step is None or step < fault.at_step:
                continue
            if not rendezvous.armed(self.control, i, fault, self.spec.region):
                continue
            self.checkpointer.wait()  # land at a quiescent point, as training runs do
            if rendezvous.meet(self.control, i, fault, step=step, rank=0, generation=self.gen):
                # The controller marks a fault fired just before it carries it out (so that it
                # never fires twice); every fault a search takes is the whole region's, so
                # hold here while it lands, or the search could snapshot past the fault's step.
                time.sleep(REGION_FAULT_LANDS_S)

    # --- snapshots ------------------------------------------------------------------------
    def maybe_snapshot(self, trials: list[Any]) -> None:
        if self.dirty and time.monotonic() - self.last_snapshot_t >= self.hpo.snapshot_interval_s:
            self.snapshot(trials)

    def _checkpoint_files(self, trial: Any, record: TrialRecord) -> dict[str, bytes] | None:
        """The trial's newest checkpoint as Tune registered it, or the one it was restored
        from while it has no newer; None for a finished trial (it will not run again)."""
        if record.status == TERMINATED or record.checkpoint_iteration is None:
            return None
        latest = _latest_checkpoint(trial)
        if latest is None or latest.checkpoint is None:
            return self.plan.checkpoints.get(record.trial_id)
        files = {}
        for name in CHECKPOINT_FILES:
            with open(os.path.join(latest.checkpoint.path, name), "rb") as fh:
                files[name] = fh.read()
        return files

    def snapshot(self, trials: list[Any], final: bool = False) -> None:
        records = self.records(trials)
        step = search_step(records)
        self.step = max(self.step, step)
        if step <= self.last_snapshot_step:
            return  # nothing new since the last one (or since the restored one)
        checkpoints: dict[str, dict[str, bytes]] = {}
        by_id = {r.trial_id: r for r in records}
        for t in trials:
            files = self._checkpoint_files(t, by_id[_trial_id(t)])
            if files is not None:
                checkpoints[_trial_id(t)] = files
        for record in self.plan.carried:
            if record.status != TERMINATED and record.trial_id in self.plan.checkpoints:
                checkpoints[record.trial_id] = self.plan.checkpoints[record.trial_id]
        rungs = None if self.rungs is None else self.rungs.to_json()
        data = pack(SearchSnapshot(records, rungs, checkpoints))
        self.checkpointer.submit(
            step,
            {ARCHIVE: data},
            extra={"kind": "hpo_experiment", "search_step": step, "trials": [r.to_json() for r in records]},
        )
        self.last_snapshot_step, self.last_snapshot_t = step, time.monotonic()
        self.dirty = False
        self.snapshots += 1
        if final:
            self.checkpointer.wait()
        self.report(trials, records, force=True)


def _restore(
    spec: RuntimeSpec, control: ControlChannel, configs: list[dict[str, Any]]
) -> tuple[int, str | None, SearchSnapshot | None]:
    """The newest verified snapshot, checked: (its step, its URL, its contents), or (0, None,
    None). A snapshot that verifies but does not check raises SnapshotError (one line)."""
    stores = spec_stores(spec, runkey.require())

    def skipped(store: CheckpointStore, step: int, reason: str) -> None:
        control.event(spec.generation, "checkpoint_skipped", step=step, reason=reason, region=store.region)

    def store_failed(store: CheckpointStore, error: str) -> None:
        control.event(spec.generation, "restore_store_skipped", region=store.region, error=error[:500])

    lineage, usable = restore_rule(spec, control, stores)
    # The snapshot's archive is kept as it is verified: read once.
    best = load_newest(
        spec.run_id, usable, skipped, lineage=lineage, on_store_error=store_failed, keep=lambda name: name == ARCHIVE
    )
    if best is None:
        return 0, None, None
    store, m = best.store, best.manifest
    hpo = search_of(spec)
    archive = best.files[ARCHIVE] if ARCHIVE in best.files else store.read(m, ARCHIVE)
    snapshot = unpack(archive, configs, hpo.max_t, _rung_list(hpo))
    recorded = {t.trial_id: t.checkpoint_iteration for t in snapshot.trials}
    for trial_id, parts in snapshot.checkpoints.items():
        try:
            state = _load(parts["state.pt"])
            iteration = int(state["iteration"])
        except Exception as exc:  # the bytes are ours (signed), yet not a checkpoint we write
            raise SnapshotError(f"{trial_id}'s checkpoint state does not load ({type(exc).__name__})") from None
        expected = recorded[trial_id]
        if iteration != expected:
            raise SnapshotError(f"{trial_id}'s checkpoint is at iteration {iteration}, its record says {expected}")
    return m.step, store.checkpoint_url(spec.run_id, m.step), snapshot


def _rung_list(hpo: HpoSection) -> list[int] | None:
    if hpo.scheduler != "asha":
        return None
    return asha_rungs(hpo.max_t, hpo.grace_period, hpo.reduction_factor)


def _tuner(spec: RuntimeSpec, driver: SearchDriver, scratch: str) -> Any:
    hpo = driver.hpo
    runtime = {
        "hpo": hpo,
        "job": spec.job,
        "data": spec.data,
        "configs": driver.configs,
        "control_url": spec.control_url,
        "control_options": spec.control_options,
        "generation": spec.generation,
    }
    trainable = tune.with_resources(
        tune.with_parameters(trial_func, runtime=runtime, resume=driver.plan.checkpoints),
        {"cpu": hpo.cpus_per_trial},
    )
    scheduler: Any = FIFOScheduler()
    if driver.rungs is not None:
        scheduler = StableASHA(driver.rungs, hpo.metric, hpo.max_t)
    return tune.Tuner(
        trainable,
        param_space={INDEX: tune.grid_search(driver.plan.run)},
        tune_config=tune.TuneConfig(
            metric=hpo.metric,
            mode=hpo.mode,
            num_samples=1,
            max_concurrent_trials=hpo.max_concurrent,
            scheduler=scheduler,
        ),
        run_config=tune.RunConfig(
            name=EXPERIMENT,
            storage_path=scratch,
            callbacks=[SearchCallback()],
            failure_config=tune.FailureConfig(max_failures=spec.trainer.max_worker_restarts),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=KEEP_TRIAL_CHECKPOINTS),
            verbose=0,
        ),
    )


def run_search(spec: RuntimeSpec, control: ControlChannel) -> int:
    """The search, from the newest snapshot if there is one; an exit code for the controller."""
    hpo = search_of(spec)
    # Tune's CSV/JSON/TensorBoard loggers: our records are the snapshots and the control channel.
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    if spec.standby:
        control.event(spec.generation, "workers_ready", pid=os.getpid(), standby=True)
        while not control.is_active(spec.generation):
            time.sleep(STANDBY_POLL_S)
    configs = sample_configs(hpo.search_space, hpo.num_samples, spec.job.seed)
    try:
        restored_step, restored_url, snapshot = _restore(spec, control, configs)
    except SnapshotError as exc:
        control.event(spec.generation, "runtime_error", error=f"search snapshot refused: {exc}"[:1000])
        return EXIT_INFRA
    control.event(
        spec.generation, "train_started", restored_step=restored_step, restored_from=restored_url, pid=os.getpid()
    )
    plan = resume_plan(snapshot, len(configs), hpo.resume_errored, hpo.restart_errored)
    rungs = _rung_list(hpo)
    asha = None if rungs is None else rungs_from(snapshot, AshaRungs(rungs, hpo.reduction_factor, hpo.mode))
    driver = SearchDriver(spec, control, restored_step, restored_url, configs, plan, asha)
    _DRIVERS.append(driver)
    results: list[Any] = []
    if plan.run:
        # Scratch is per cluster; a Tune experiment of an earlier attempt there is not ours to go on from.
        os.makedirs(spec.ray_storage_path, mode=0o700, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix="tune-", dir=spec.ray_storage_path)
        try:
            results = list(_tuner(spec, driver, scratch).fit())
        except FencedError:
            return EXIT_INFRA
        except Exception as exc:
            control.event(spec.generation, "runtime_error", error=f"{type(exc).__name__}: {exc}"[:1000])
            return EXIT_INFRA
    return _finish(spec, control, driver, results)


def _finish(spec: RuntimeSpec, control: ControlChannel, driver: SearchDriver, results: list[Any]) -> int:
    hpo = driver.hpo
    records = {r.trial_id: r for r in driver.plan.carried}
    for r in results:
        m = r.metrics or {}
        index = int((r.config or {})[INDEX])
        sha = m.get("weights_sha256")
        records[trial_key(index)] = TrialRecord(
            trial_id=trial_key(index),
            status=ERROR if r.error is not None else TERMINATED,
            iteration=int(m.get("iteration", 0) or 0),
            config=dict(driver.configs[index]),
            metrics={k: float(m[k]) for k in ("accuracy", "eval_loss") if k in m},
            checkpoint_iteration=int(m.get("iteration", 0) or 0) if r.checkpoint is not None else None,
            error=None if r.error is None else f"{type(r.error).__name__}: {str(r.error)[:300]}",
            weights_sha256=sha if isinstance(sha, str) else None,
        )
    ordered = [records[k] for k in sorted(records)]
    try:
        driver.checkpointer.wait()
    except Exception as exc:
        control.event(spec.generation, "runtime_error", error=f"final snapshot not committed: {exc}"[:1000])
        return EXIT_INFRA
    best = best_of(ordered, hpo.metric, hpo.mode)
    if best is None:
        control.event(spec.generation, "user_error", rank=0, error="every trial of the search errored")
        return EXIT_USER_ERROR
    workers = [
        {**(r.metrics or {}).get("telemetry", {}), "rank": i, "trial_id": trial_key(int(r.config[INDEX]))}
        for i, r in enumerate(results)
        if isinstance((r.metrics or {}).get("telemetry"), dict)
    ]
    step = search_step(ordered)
    control.progress(spec.generation, step=step, total=driver.total, last_checkpoint=driver.last_checkpoint)
    control.final(
        spec.generation,
        final_step=step,
        metrics=dict(best.metrics),
        weights_sha256=best.weights_sha256,
        final_checkpoint=driver.last_checkpoint,
        best_trial={
            **best.to_json(),
            "metric": hpo.metric,
            "mode": hpo.mode,
            "value": best.metrics[hpo.metric],
        },
        trials=[r.to_json() for r in ordered],
        search={
            "scheduler": hpo.scheduler,
            "max_t": hpo.max_t,
            "rungs": _rung_list(hpo) or [],
            "snapshots": driver.snapshots,
        },
        telemetry=summary(workers) if workers else None,
    )
    return EXIT_OK
