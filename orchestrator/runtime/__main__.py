"""The runtime driver: ``python -m orchestrator.runtime SPEC.json``, run on the cluster.

Connects to the region's Ray cluster, renews the heartbeat lease, runs the
workload under Ray Train, and exits with a code the controller classifies.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from orchestrator.wire import runkey
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.spec import TRAIN_ENV, RuntimeSpec
from recovery.detection import EXIT_INFRA, EXIT_OK, EXIT_PREEMPTED, EXIT_USER_ERROR, EXIT_WORKERS_EXHAUSTED


def _heartbeats(control: ControlChannel, spec: RuntimeSpec, stop: threading.Event) -> None:
    while True:
        progress = control.read_progress(spec.generation)
        try:
            control.heartbeat(spec.generation, step=0 if progress is None else progress.step, pid=os.getpid())
        except OSError:
            pass  # a missed renewal is what the lease is for
        if stop.wait(spec.heartbeat_interval_s):
            return


def _relay_preemption(control: ControlChannel, spec: RuntimeSpec) -> None:
    """A preemption notice (SIGTERM, as a cloud sends before reclaiming a VM) is
    passed on to the workers, which checkpoint and stop; the driver stays to report.

    SIGTERM is blocked in every thread (call this before any other thread exists)
    and taken by a thread of its own with sigwait: a Python handler would run only
    when the main thread, blocked in Ray Train's fit(), next gets control (~1 s)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def relay() -> None:
        while True:
            signal.sigwait({signal.SIGTERM})
            control.preempt_notice(spec.generation, pid=os.getpid())
            control.event(spec.generation, "preemption_notice", pid=os.getpid())

    threading.Thread(target=relay, name="preemption-relay", daemon=True).start()


def main(argv: list[str]) -> int:
    try:
        spec = RuntimeSpec.load(argv[0])
    except (OSError, ValueError) as exc:
        # No control channel without a spec: the reason goes to the runtime's log, one
        # line; the controller sees the exit code (a spec it wrote that this runtime
        # cannot read, say from a newer controller, is the platform's failure).
        print(f"orchestrator.runtime: {exc}", file=sys.stderr)
        return EXIT_INFRA
    # Out of the environment before any thread or child starts: nothing inherits it.
    try:
        key = runkey.take_from_env()
    except runkey.RunKeyError as exc:
        key, bad_key = None, str(exc)
    else:
        bad_key = f"{runkey.ENV} is not set"
    if key is not None and key.generation != spec.generation:
        key, bad_key = None, f"{runkey.ENV} holds generation {key.generation}'s keys, not {spec.generation}'s"
    # Without its keys the runtime's words go unsealed: the controller drops them, saying why.
    control = ControlChannel(spec.control_url, spec.control_options, keys=key)
    control.event(spec.generation, "driver_started", pid=os.getpid())
    if key is None:
        control.event(spec.generation, "runtime_error", error=f"{bad_key}: checkpoints cannot be signed")
        return EXIT_INFRA
    runkey.install(key)
    _relay_preemption(control, spec)
    stop = threading.Event()
    threading.Thread(target=_heartbeats, args=(control, spec, stop), daemon=True).start()
    os.environ.update(TRAIN_ENV)  # the cluster has them too: see AttemptRunner.launch
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig

    from orchestrator.runtime.group.process_group import torch_config
    from orchestrator.runtime.loop.train_loop import train_func
    from orchestrator.runtime.trainer import make_trainer

    try:
        ray.init(
            address=spec.ray_address,
            log_to_driver=False,
            logging_level="ERROR",
        )
    except Exception as exc:
        control.event(spec.generation, "runtime_error", error=f"cannot connect to Ray: {exc}"[:500])
        return EXIT_INFRA
    control.event(spec.generation, "driver_connected", pid=os.getpid())
    if spec.hpo is not None:
        from orchestrator.runtime.search.run import run_search

        try:
            return run_search(spec, control)
        finally:
            stop.set()
    worker_fn = train_func
    if spec.job.train_func:
        # job.train_func: the user's own Ray Train function, its reports and restores through our stores.
        from orchestrator.runtime.loop.func_mode import train_func as worker_fn
    gpus = spec.trainer.gpus_per_worker
    world = None
    if spec.nodes > 1 or spec.trainer.min_workers not in (0, spec.trainer.workers):
        from orchestrator.runtime.group.world import WorldPolicy

        world = WorldPolicy(spec, control)
    config = torch_config("nccl" if gpus > 0 else "gloo")
    from orchestrator.runtime.group.process_group import REPLICAS, survivor_config
    from orchestrator.runtime.group.rendezvous import why_no_spares, why_not_survivors
    from orchestrator.runtime.trainer import RAY_TRAIN_HOOKS

    shared = runkey.share(key)  # an object ref to the run's keys, never the keys
    why_not = why_not_survivors(spec) or (
        None if REPLICAS and RAY_TRAIN_HOOKS else "this Ray cannot replace one worker"
    )
    if why_not is None:
        config = survivor_config("gloo", spec.run_id, spec.generation)
    elif spec.survivors != "off" and spec.trainer.workers > 1:
        control.event(spec.generation, "survivors_off", reason=why_not)
    if RAY_TRAIN_HOOKS and why_no_spares(spec) is None:
        # Spares: a lost worker's replacement, and every worker of a group restarted
        # whole (where survivors are not kept), is a process started ahead.
        from orchestrator.runtime.group import spares

        def training(since: float) -> bool:
            progress = control.read_progress(spec.generation)
            return progress is not None and progress.time > since

        def journal(**fields: Any) -> None:
            control.event(spec.generation, "spare_taken", **fields)

        spares.enable(spec.job.workload, training, journal, list(shared.values()), (train_func.__module__,))
    from orchestrator.runtime.group import placement

    placement.enable(lambda **fields: control.event(spec.generation, "placement_reused", **fields))
    trainer = make_trainer(
        worker_fn,
        # Plain JSON, as the spec file: each worker reads it back (RuntimeSpec.from_plain).
        train_loop_config={"spec": spec.to_plain(), **shared},
        scaling_config=ScalingConfig(
            num_workers=spec.trainer.workers,
            use_gpu=gpus > 0,
            resources_per_worker={"CPU": spec.trainer.cpus_per_worker, **({"GPU": gpus} if gpus else {})},
            # One worker per node where it can: a lost node is then one worker's loss.
            placement_strategy="SPREAD" if spec.nodes > 1 else "PACK",
        ),
        world=world,
        # NCCL between GPU workers; gloo on CPUs. Its store listens on the master's address only.
        torch_config=config,
        run_config=RunConfig(
            name=f"{spec.run_id}-g{spec.generation}",
            storage_path=spec.ray_storage_path,
            failure_config=FailureConfig(max_failures=spec.trainer.max_worker_restarts),
        ),
        **_datasets(spec),
    )
    try:
        trainer.fit()
    except Exception as exc:
        control.event(spec.generation, "runtime_error", error=f"{type(exc).__name__}: {exc}"[:1000])
        return EXIT_USER_ERROR if _user_error_seen(control, spec) else EXIT_WORKERS_EXHAUSTED
    finally:
        stop.set()
    if control.read_final(spec.generation) is None:
        if _seen(control, spec, "preempted"):
            return EXIT_PREEMPTED
        control.event(spec.generation, "runtime_error", error="training ended without a result")
        return EXIT_INFRA
    return EXIT_OK


def _datasets(spec: RuntimeSpec) -> dict[str, object]:
    """data.loader=ray_data: the training set as a Ray Data dataset, split by Ray Train."""
    if spec.data.loader != "ray_data":
        return {}
    from orchestrator.workloads import make_workload
    from orchestrator.workloads.data import DATASET_KEY, data_config, ray_dataset

    workload = make_workload(spec.job.to_plain(), spec.data.to_plain())
    return {"datasets": {DATASET_KEY: ray_dataset(workload)}, "dataset_config": data_config()}


def _user_error_seen(control: ControlChannel, spec: RuntimeSpec) -> bool:
    return _seen(control, spec, "user_error")


def _seen(control: ControlChannel, spec: RuntimeSpec, type_: str) -> bool:
    return any(e.kind == type_ for e in control.read_events(spec.generation, set()))


if __name__ == "__main__":
    # Read now: the spec's file lives in the controller's run folder, which a lost host
    # (controller_host_loss) takes with it while this attempt trains on.
    try:
        exit_spec: RuntimeSpec | None = RuntimeSpec.load(sys.argv[1])
    except Exception:
        exit_spec = None
    code = main(sys.argv[1:])
    try:
        # A controller that did not start this process (a resumed one) cannot wait for it.
        if exit_spec is not None:
            keys = runkey.current()
            channel = ControlChannel(exit_spec.control_url, exit_spec.control_options, keys=keys)
            channel.exited(exit_spec.generation, code)
    except Exception:
        pass
    sys.stdout.flush()
    # Ray's atexit hooks can stall on a cluster that is going away; the outcome is written.
    os._exit(code)
