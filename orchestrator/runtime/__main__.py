"""The runtime driver: ``python -m orchestrator.runtime SPEC.json``, run on the cluster.

Connects to the region's Ray cluster, renews the heartbeat lease, runs the
workload under Ray Train, and exits with a code the controller classifies.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import asdict

from orchestrator.runtime.control import ControlChannel
from orchestrator.runtime.spec import TRAIN_ENV, RuntimeSpec
from recovery.detection import EXIT_INFRA, EXIT_OK, EXIT_USER_ERROR, EXIT_WORKERS_EXHAUSTED


def _heartbeats(control: ControlChannel, spec: RuntimeSpec, stop: threading.Event) -> None:
    while True:
        progress = control.read_progress(spec.generation) or {}
        try:
            control.heartbeat(spec.generation, step=progress.get("step", 0), pid=os.getpid())
        except OSError:
            pass  # a missed renewal is what the lease is for
        if stop.wait(spec.heartbeat_interval_s):
            return


def main(argv: list[str]) -> int:
    spec = RuntimeSpec.load(argv[0])
    control = ControlChannel(spec.control_url)
    control.event(spec.generation, "driver_started", pid=os.getpid())
    stop = threading.Event()
    threading.Thread(target=_heartbeats, args=(control, spec, stop), daemon=True).start()
    os.environ.update(TRAIN_ENV)  # the cluster has them too: see AttemptRunner.launch
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from orchestrator.runtime.train_loop import train_func

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
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"spec": asdict(spec)},
        scaling_config=ScalingConfig(
            num_workers=int(spec.trainer["workers"]),
            use_gpu=float(spec.trainer["gpus_per_worker"]) > 0,
            resources_per_worker={
                "CPU": float(spec.trainer["cpus_per_worker"]),
                **({"GPU": float(spec.trainer["gpus_per_worker"])} if spec.trainer["gpus_per_worker"] else {}),
            },
        ),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(
            name=f"{spec.run_id}-g{spec.generation}",
            storage_path=spec.ray_storage_path,
            failure_config=FailureConfig(max_failures=int(spec.trainer["max_worker_restarts"])),
        ),
    )
    try:
        trainer.fit()
    except Exception as exc:
        control.event(spec.generation, "runtime_error", error=f"{type(exc).__name__}: {exc}"[:1000])
        return EXIT_USER_ERROR if _user_error_seen(control, spec) else EXIT_WORKERS_EXHAUSTED
    finally:
        stop.set()
    if control.read_final(spec.generation) is None:
        control.event(spec.generation, "runtime_error", error="training ended without a result")
        return EXIT_INFRA
    return EXIT_OK


def _user_error_seen(control: ControlChannel, spec: RuntimeSpec) -> bool:
    return any(e.get("type") == "user_error" for e in control.read_events(spec.generation, set()))


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    # Ray's atexit hooks can stall on a cluster that is going away; the outcome is written.
    os._exit(code)
