"""A Ray Tune search as an attempt's workload: ``run_search``, resumable in another region.

From the newest snapshot if there is one (``restore``), a Tune experiment over the trials
that remain (``tuner``), driven and snapshotted by ``driver``; once it has ended, the
search's result to the controller (``finish``): the best trial, every trial's record.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from ray import tune

from orchestrator.hpo import AshaRungs, best_of, sample_configs, search_step
from orchestrator.hpo.replay import OptunaReplay
from orchestrator.hpo.trials import ray_train_trial
from orchestrator.runtime.loop.telemetry import summary
from orchestrator.runtime.search.driver import SearchCallback, SearchDriver, install, report_exploit
from orchestrator.runtime.search.func_trial import func_trial
from orchestrator.runtime.search.records import ended_records, result_workers
from orchestrator.runtime.search.restore import proposer_from, restore_search
from orchestrator.runtime.search.scheduler import StablePBT, make_scheduler
from orchestrator.runtime.search.searcher import ProposingSearcher
from orchestrator.runtime.search.section import rung_list, search_of
from orchestrator.runtime.search.snapshot import Expected, SnapshotError, resume_plan, rungs_from
from orchestrator.runtime.search.train_trial import train_trial
from orchestrator.runtime.search.trial import INDEX, trial_func, trial_inputs
from orchestrator.wire import runkey
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.sections import HpoSection
from orchestrator.wire.spec import RuntimeSpec
from recovery.detection import EXIT_INFRA, EXIT_OK, EXIT_USER_ERROR
from recovery.fencing import FencedError

STANDBY_POLL_S = 0.05


def run_search(spec: RuntimeSpec, control: ControlChannel) -> int:
    """The search, from the newest snapshot if there is one; an exit code for the controller."""
    hpo = search_of(spec)
    # Tune's CSV/JSON/TensorBoard loggers: our records are the snapshots and the control channel.
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    if spec.standby:
        control.event(spec.generation, "workers_ready", pid=os.getpid(), standby=True)
        while not control.is_active(spec.generation):
            time.sleep(STANDBY_POLL_S)
    proposes = hpo.search_alg != "random"
    # The search's list of trials: drawn up front, or grown as its searcher proposes them.
    configs = [] if proposes else sample_configs(hpo.search_space, hpo.num_samples, spec.job.seed)
    functions = bool(spec.job.train_func)
    if proposes:
        expected = Expected(hpo.num_samples, None, hpo.search_space, proposes=True, functions=functions)
    else:
        evolves = hpo.scheduler == "pbt"
        expected = Expected(len(configs), configs, hpo.search_space, evolves=evolves, functions=functions)
    proposer: OptunaReplay | None = None
    try:
        restored_step, restored_url, snapshot = restore_search(spec, control, expected)
        if proposes:
            proposer, configs = proposer_from(hpo, spec.job.seed, snapshot)
        elif snapshot is not None and expected.evolves:
            # PBT: a trial goes on with the values it had (explored ones, after an exploit).
            for record in snapshot.trials:
                configs[int(record.trial_id.split("_")[1])] = dict(record.config)
    except SnapshotError as exc:
        control.event(spec.generation, "runtime_error", error=f"search snapshot refused: {exc}"[:1000])
        return EXIT_INFRA
    control.event(
        spec.generation, "train_started", restored_step=restored_step, restored_from=restored_url, pid=os.getpid()
    )
    plan = resume_plan(snapshot, len(configs), hpo.resume_errored, hpo.restart_errored)
    rungs = rung_list(hpo)
    asha = None if rungs is None else rungs_from(snapshot, AshaRungs(rungs, hpo.reduction_factor, hpo.mode))
    refs, read_from = (None, None) if snapshot is None else (snapshot.refs, snapshot.read_from)
    driver = SearchDriver(
        spec, control, restored_step, restored_url, configs, plan, asha, expected.count, proposer, refs, read_from
    )
    if expected.evolves:
        driver.exploits = list(snapshot.exploits or []) if snapshot is not None else []
    install(driver)
    results: list[Any] = []
    if trials_left(driver):
        # Scratch is per cluster; a Tune experiment of an earlier attempt there is not ours to go on from.
        os.makedirs(spec.ray_storage_path, mode=0o700, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix="tune-", dir=spec.ray_storage_path)
        try:
            results = list(build_tuner(spec, driver, scratch).fit())
        except FencedError:
            return EXIT_INFRA
        except Exception as exc:
            control.event(spec.generation, "runtime_error", error=f"{type(exc).__name__}: {exc}"[:1000])
            return EXIT_INFRA
    return finish(spec, control, driver, results)


def finish(spec: RuntimeSpec, control: ControlChannel, driver: SearchDriver, results: list[Any]) -> int:
    """The final snapshot committed, then the search's result: its best trial, or a user
    error when every trial errored."""
    hpo = driver.hpo
    ordered = ended_records(driver.snapshot_records, driver.plan.carried, results, driver.configs)
    try:
        driver.uploads.wait()
    except Exception as exc:
        control.event(spec.generation, "runtime_error", error=f"final snapshot not committed: {exc}"[:1000])
        return EXIT_INFRA
    best = best_of(ordered, hpo.metric, hpo.mode)
    if best is None:
        control.event(spec.generation, "user_error", rank=0, error="every trial of the search errored")
        return EXIT_USER_ERROR
    workers = result_workers(results)
    step = search_step(ordered)
    # Ended, the search took the steps it took: its total, whatever its most (every trial to
    # max_t) was, or a search ASHA cut short would end at "26/42".
    control.progress(spec.generation, step=step, total=step, last_checkpoint=driver.last_checkpoint)
    control.final(
        spec.generation,
        final_step=step,
        metrics=dict(best.metrics),
        weights_sha256=best.weights_sha256,
        checkpoint_sha256=best.checkpoint_sha256,
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
            "search_alg": hpo.search_alg,
            "max_t": hpo.max_t,
            "rungs": rung_list(hpo) or [],
            "snapshots": driver.snapshots,
            **({} if driver.exploits is None else {"exploits": [e.to_json() for e in driver.exploits]}),
        },
        telemetry=summary(workers) if workers else None,
    )
    return EXIT_OK


# --- the Tune experiment of an attempt: its trials, scheduler and run config, on scratch ---
EXPERIMENT = "search"
# Trial checkpoints Tune keeps (the newest is the one a trial resumes from).
KEEP_TRIAL_CHECKPOINTS = 2


def keep_trial_checkpoints(hpo: HpoSection) -> int:
    """Trial checkpoints Tune keeps on scratch: the newest two, or under PBT every one (a
    trial that exploits another takes a checkpoint its owner has moved past)."""
    return hpo.max_t if hpo.scheduler == "pbt" else KEEP_TRIAL_CHECKPOINTS


def pbt_of(spec: RuntimeSpec, driver: SearchDriver) -> StablePBT:
    """PBT over the driver's trials: an exploit replaces the trial's values in its list and
    goes to the driver (journaled, snapshotted); a restored trial perturbs next one
    interval after its checkpoint."""
    started = {t: r.checkpoint_iteration or 0 for t, r in driver.plan.restored.items()}
    return StablePBT(driver.hpo, spec.job.seed, driver.configs, report_exploit, started)


def ray_train_trials(spec: RuntimeSpec) -> bool:
    workers = 1 if spec.hpo is None else spec.hpo.trial.workers
    return ray_train_trial(workers, spec.job.train_func, spec.data.loader)


def concurrent_trials(hpo: HpoSection, cluster_cpus: float | None = None, ray_train: bool | None = None) -> int:
    """Trials at once: hpo.max_concurrent, and for Ray Train trials (``ray_train``; by
    default, multi-worker ones) no more than the cluster's CPUs hold (their Tune trials
    take none, so Tune would start them all, and each Ray Train run would wait for
    workers that others hold)."""
    if not (hpo.trial.workers > 1 if ray_train is None else ray_train):
        return hpo.max_concurrent
    if cluster_cpus is None:
        import ray

        cluster_cpus = float(ray.cluster_resources().get("CPU", 0))
    fits = int(cluster_cpus // (hpo.trial.workers * hpo.trial.cpus_per_worker))
    return max(1, min(hpo.max_concurrent, fits))


def reuse_trial_processes(spec: RuntimeSpec) -> bool:
    """hpo.reuse_processes: a trial's process goes on to the next trial. Under auto, only
    where no user code runs in it: a trial trains in its own process (a world of one) only
    a built-in workload's; a Ray Train trial's process only starts its workers, new each time.
    A user's module-level state would otherwise carry from one trial to the next."""
    from orchestrator.workloads import is_builtin

    hpo = spec.hpo
    mode = "off" if hpo is None else hpo.reuse_processes
    if mode != "auto":
        return mode == "on"
    return ray_train_trials(spec) or (not spec.job.train_func and is_builtin(spec.job.workload))


def trials_left(driver: SearchDriver) -> int:
    """Trials this attempt runs: the plan's, and those the searcher has yet to propose."""
    unproposed = 0 if driver.proposer is None else driver.proposer.num_samples - driver.proposer.asked
    return len(driver.plan.run) + unproposed


def build_tuner(spec: RuntimeSpec, driver: SearchDriver, scratch: str) -> Any:
    """A Tuner over the trials ``driver``'s plan runs (a grid of their indexes; with a
    searcher that proposes trials, those first, then its proposals), its experiment folder
    under ``scratch``, Tune's events to ``driver``."""
    hpo = driver.hpo
    if driver.proposer is None:
        space: dict[str, Any] = {INDEX: tune.grid_search(driver.plan.run)}
        searcher, samples = None, 1
    else:
        space = {}
        searcher = ProposingSearcher(driver.proposer, driver.configs, driver.plan.run, hpo.metric, hpo.mode)
        samples = trials_left(driver)
    # A Ray Train trial's CPUs are its workers': its Tune trial takes none (Tune needs a
    # resource of some kind: one byte of memory).
    ray_train = ray_train_trials(spec)
    func = func_trial if spec.job.train_func else train_trial if ray_train else trial_func
    # The run's keys go to the trials as to Ray Train's workers: a reference, never the keys.
    runtime = {**trial_inputs(spec, hpo, driver.configs), **runkey.share(runkey.require())}
    trainable = tune.with_resources(
        tune.with_parameters(func, runtime=runtime, resume=driver.plan.checkpoints),
        {"cpu": 0, "memory": 1} if ray_train else {"cpu": hpo.cpus_per_trial},
    )
    return tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(
            metric=hpo.metric,
            mode=hpo.mode,
            num_samples=samples,
            search_alg=searcher,
            max_concurrent_trials=concurrent_trials(hpo, ray_train=ray_train),
            reuse_actors=reuse_trial_processes(spec),
            scheduler=make_scheduler(hpo, driver.rungs, lambda: pbt_of(spec, driver)),
        ),
        run_config=tune.RunConfig(
            name=EXPERIMENT,
            storage_path=scratch,
            callbacks=[SearchCallback()],
            failure_config=tune.FailureConfig(max_failures=spec.trainer.max_worker_restarts),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=keep_trial_checkpoints(hpo)),
            verbose=0,
        ),
    )
