"""Training throughput under the orchestrator / a bare Ray Train script of the same loop.

Both train the digits workload with the same model, data, optimizer, seed and
worker count on a 2-CPU local cluster, timed inside the training function from
the first step to the last. The orchestrator's run also checkpoints (every
``checkpoint.interval_steps``), reports progress, renews its lease and replicates.

    python benchmarks/overhead.py [--steps 3000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import orchestrate, ray_client_env, temp_home

JOB = {
    "workload": "digits",
    "seed": 0,
    "batch_size": 64,
    "lr": 0.05,
    "hidden_size": 256,
    "eval_fraction": 0.25,
}


def bare_train(config: dict) -> None:
    import ray.train
    import torch
    from ray.train.torch import prepare_model

    from orchestrator.workloads.digits import Digits

    torch.set_num_threads(1)
    torch.manual_seed(0)
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    w = Digits(JOB)
    model = w.model()
    opt = w.optimizer(model)
    ddp = prepare_model(model, move_to_device=False)
    steps = int(config["steps"])
    t0 = time.time()
    for step in range(1, steps + 1):
        opt.zero_grad(set_to_none=True)
        w.loss(ddp, w.batch(step, rank, world)).backward()
        opt.step()
    if rank == 0:
        Path(config["out"]).write_text(str(steps / (time.time() - t0)))


def bare_run(steps: int) -> float:
    ray_client_env()
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from orchestrator.wire.spec import TRAIN_ENV
    from providers.base import RegionSpec
    from providers.local import LocalProvider

    provider = LocalProvider()
    cluster = provider.launch(RegionSpec("bench", "file:///tmp", 2), f"bench-bare-{time.time_ns()}", 60, env=TRAIN_ENV)
    try:
        os.environ.update(TRAIN_ENV)
        # The cluster takes only its own token (the local provider turns Ray's token auth on).
        os.environ.update({k: v for k, v in provider.cluster_env(cluster).items() if k.startswith("RAY_AUTH")})
        ray.init(address=cluster.address, log_to_driver=False)
        trainer = TorchTrainer(
            bare_train,
            train_loop_config={"steps": steps, "out": cluster.info["temp_dir"] + "/rate"},
            scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1.0}),
            torch_config=TorchConfig(backend="gloo"),
            run_config=RunConfig(name="bare", storage_path=cluster.info["temp_dir"] + "/train"),
        )
        trainer.fit()
        return float(Path(cluster.info["temp_dir"], "rate").read_text())
    finally:
        ray.shutdown()
        provider.teardown(cluster)


def orchestrated_run(steps: int, i: int, interval: int) -> float:
    result, _ = orchestrate(temp_home(), f"overhead-{i}", f"job.steps={steps}", f"checkpoint.interval_steps={interval}")
    return float(result["train_steps_per_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--interval", type=int, default=50, help="checkpoint.interval_steps (the job's default: 50)")
    args = ap.parse_args()
    bare, orch = [], []
    for i in range(args.rounds):
        # Interleaved, so a slow phase of the machine hits both sides.
        bare.append(bare_run(args.steps))
        orch.append(orchestrated_run(args.steps, i, args.interval))
        print(f"round {i + 1}: bare {bare[-1]:.1f} steps/s, orchestrated {orch[-1]:.1f} steps/s", flush=True)
    b, o = statistics.median(bare), statistics.median(orch)
    ratios = [x / y for x, y in zip(orch, bare, strict=True)]
    print(f"steps: {args.steps}, workers: 2, checkpoint every {args.interval} steps (orchestrated)")
    print(f"bare Ray Train:   {b:.1f} steps/s (median of {args.rounds})")
    print(f"orchestrated:     {o:.1f} steps/s (median of {args.rounds})")
    print(f"ratio per round:  {', '.join(f'{r:.3f}' for r in ratios)}")
    print(f"ratio orchestrated/bare: {statistics.median(ratios):.3f} median  (goal >= 0.97)")


if __name__ == "__main__":
    main()
