"""The runtime driver: ``python -m orchestrator.runtime SPEC.json``, run on the cluster.

Connects to the region's Ray cluster, renews the heartbeat lease, plans the attempt from
its spec and what this Ray can do (``plan.plan_attempt``), carries the plan out under Ray
Train (``carry_out``), and exits with a code the controller classifies.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from orchestrator.runtime.plan import Entry, Plan, RayOffers, exit_after_fit, plan_attempt
from orchestrator.wire import runkey
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.spec import TRAIN_ENV, RuntimeSpec
from recovery.detection import EXIT_INFRA
from recovery.keys import AttemptKeys


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

    from orchestrator.runtime.group.process_group import REPLICAS
    from orchestrator.runtime.trainer import RAY_TRAIN_HOOKS

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
    plan = plan_attempt(spec, RayOffers(replicas=REPLICAS, hooks=RAY_TRAIN_HOOKS))
    try:
        return carry_out(plan, spec, control, key)
    finally:
        stop.set()


def carry_out(plan: Plan, spec: RuntimeSpec, control: ControlChannel, key: AttemptKeys) -> int:
    """Run the attempt as ``plan`` says, on the Ray this driver is connected to; its exit code."""
    if plan.entry is Entry.SEARCH:
        from orchestrator.runtime.search.run import run_search

        return run_search(spec, control)
    from ray.train import FailureConfig, RunConfig, ScalingConfig

    from orchestrator.runtime.group import placement
    from orchestrator.runtime.group.process_group import survivor_config, torch_config
    from orchestrator.runtime.group.world import WorldPolicy
    from orchestrator.runtime.loop.train_loop import train_func
    from orchestrator.runtime.trainer import make_trainer

    worker_fn = train_func
    if plan.entry is Entry.TRAIN_FUNC:
        # job.train_func: the user's own Ray Train function, its reports and restores through our stores.
        from orchestrator.runtime.loop.func_mode import train_func as worker_fn
    shared = runkey.share(key)  # an object ref to the run's keys, never the keys
    if plan.survivors_off_said:
        control.event(spec.generation, "survivors_off", reason=plan.survivors_why)
    if plan.spares:
        # A lost worker's replacement, and every worker of a group restarted whole (where
        # survivors are not kept), is a process started ahead, the loop imported.
        _keep_spares(spec, control, list(shared.values()), train_func.__module__)
    placement.enable(lambda **fields: control.event(spec.generation, "placement_reused", **fields))
    trainer = make_trainer(
        worker_fn,
        # Plain JSON, as the spec file: each worker reads it back (RuntimeSpec.from_plain).
        train_loop_config={"spec": spec.to_plain(), **shared},
        scaling_config=ScalingConfig(
            num_workers=plan.workers,
            use_gpu=plan.use_gpu,
            resources_per_worker=dict(plan.resources_per_worker),
            placement_strategy=plan.placement_strategy,
        ),
        world=WorldPolicy(spec, control) if plan.sized else None,
        # NCCL between GPU workers; gloo on CPUs. Its store listens on the master's address only.
        torch_config=survivor_config(plan.backend, spec.run_id, spec.generation)
        if plan.survivors
        else torch_config(plan.backend),
        run_config=RunConfig(
            name=f"{spec.run_id}-g{spec.generation}",
            storage_path=spec.ray_storage_path,
            failure_config=FailureConfig(max_failures=spec.trainer.max_worker_restarts),
        ),
        **(_datasets(spec) if plan.ray_datasets else {}),
    )
    try:
        trainer.fit()
    except Exception as exc:
        control.event(spec.generation, "runtime_error", error=f"{type(exc).__name__}: {exc}"[:1000])
        return exit_after_fit(raised=True, user_error=_seen(control, spec, "user_error"), final=False, preempted=False)
    final = control.read_final(spec.generation) is not None
    preempted = not final and _seen(control, spec, "preempted")
    code = exit_after_fit(raised=False, user_error=False, final=final, preempted=preempted)
    if code == EXIT_INFRA:
        control.event(spec.generation, "runtime_error", error="training ended without a result")
    return code


def _keep_spares(spec: RuntimeSpec, control: ControlChannel, shared: list[Any], loop_module: str) -> None:
    from orchestrator.runtime.group import spares

    def training(since: float) -> bool:
        progress = control.read_progress(spec.generation)
        return progress is not None and progress.time > since

    def journal(**fields: Any) -> None:
        control.event(spec.generation, "spare_taken", **fields)

    spares.enable(spec.job.workload, training, journal, shared, (loop_module,))


def _datasets(spec: RuntimeSpec) -> dict[str, object]:
    """data.loader=ray_data: the training set as a Ray Data dataset, split by Ray Train."""
    from orchestrator.workloads import make_workload
    from orchestrator.workloads.data import DATASET_KEY, data_config, ray_dataset

    workload = make_workload(spec.job.to_plain(), spec.data.to_plain())
    return {"datasets": {DATASET_KEY: ray_dataset(workload)}, "dataset_config": data_config()}


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
