"""Training throughput with checkpoints: ours (async, sync) / Ray Train's own / none.

Four arms train the digits workload with the same model, data, optimizer, seed and
worker count on a 2-CPU local cluster, each timed inside the training function from
the first step to the last:

- ``none``: a bare Ray Train loop, no checkpoints;
- ``ray_native``: the same loop checkpointing the way a Ray user does today: rank 0
  saves the model and optimizer state with ``torch.save`` into a temporary folder and
  hands it to ``ray.train.report(checkpoint=Checkpoint.from_directory(...))`` (its
  default, synchronous upload) with ``RunConfig(storage_path=<a local folder>)``;
- ``async`` / ``sync``: the orchestrated run (``checkpoint.async_upload=true|false``),
  which also reports progress, renews its lease and replicates, to its local file store.

Each checkpointing arm runs at two cadences: ``high`` (every ``--interval`` steps) and
``realistic`` (one checkpoint per ``--realistic-s`` seconds of training, derived from the
first round's ``none`` rate, or ``--realistic-interval`` steps).

The stall is the time the training loop is blocked per checkpoint, measured on rank 0:
Ray native's around the save and the report call, ours by the runtime around its
snapshot (``checkpoint_stall_s`` in ``result.json``: the median over the run's
checkpoints). Each is also estimated from the two cadences: if a step costs ``t0`` and each
checkpoint ``s``, a run of ``N`` steps with ``n`` checkpoints (the last step's included)
takes ``t0 + s * n / N`` per step, and the two cadences give ``s`` (the orchestrator's
costs that do not depend on the cadence cancel out). The estimate counts everything a
checkpoint costs the loop, CPU taken by the background upload included; it stands in
(marked ``~``) for a runtime that does not report its stall.

    python benchmarks/overhead.py [--steps 3000] [--rounds 2] [--interval 50]
        [--realistic-s 10 | --realistic-interval STEPS] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import orchestrate, ray_client_env, temp_home, write_json

JOB = {
    "workload": "digits",
    "seed": 0,
    "batch_size": 64,
    "lr": 0.05,
    "hidden_size": 256,
    "eval_fraction": 0.25,
}
WORKERS = 2
KEEP_LAST = 3  # the job's checkpoint.keep_last; Ray native keeps as many
STALL_GOAL = 0.03  # CheckFreq's bound: stall per checkpoint / checkpoint interval
ASYNC_GOAL = 0.97  # ours async / none at the realistic cadence

CHECKPOINTING = ("ray_native", "async", "sync")
CADENCES = ("high", "realistic")
LABELS = {"none": "none", "ray_native": "Ray native", "async": "ours async", "sync": "ours sync"}


# --- pure parts -----------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000, help="training steps of every run")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of all arms, interleaved")
    ap.add_argument("--interval", type=int, default=50, help="the high cadence: a checkpoint every this many steps")
    ap.add_argument(
        "--realistic-s", type=float, default=10.0, help="the realistic cadence: a checkpoint per this many seconds"
    )
    ap.add_argument(
        "--realistic-interval", type=int, default=None, help="the realistic cadence in steps (skips the derivation)"
    )
    ap.add_argument("--json", metavar="PATH", help="write the figures and ratios there (flat keys)")
    args = ap.parse_args(argv)
    for name in ("steps", "rounds", "interval", "realistic_interval"):
        value = getattr(args, name)
        if value is not None and value < 1:
            ap.error(f"--{name.replace('_', '-')}: got {value}; expected an integer >= 1")
    if args.realistic_s <= 0:
        ap.error(f"--realistic-s: got {args.realistic_s}; expected seconds > 0")
    return args


def realistic_interval(none_steps_per_s: float, target_s: float) -> int:
    """Steps in ``target_s`` seconds of training at the bare loop's rate (at least one)."""
    return max(1, round(none_steps_per_s * target_s))


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base <= 0:
        return None
    return value / base


def median_ratio(values: Sequence[float], bases: Sequence[float]) -> float | None:
    """The median of the per-round ratios (rounds are interleaved: a slow phase of the
    machine hits both sides of a ratio)."""
    ratios = [r for v, b in zip(values, bases, strict=True) if (r := ratio(v, b)) is not None]
    return statistics.median(ratios) if ratios else None


def checkpoints_in(steps: int, interval: int) -> int:
    """Checkpoints a run of ``steps`` takes: every ``interval`` steps and at the last step."""
    return -(-steps // interval)


def stall_from_cadences(rate_a: float, interval_a: int, rate_b: float, interval_b: int, steps: int) -> float | None:
    """The per-checkpoint cost ``s`` from two runs of ``steps`` steps checkpointing every
    ``interval_a`` and ``interval_b`` steps: with ``n`` checkpoints in a run, a step takes
    ``1 / rate = t0 + s * n / steps``. None when both runs take as many checkpoints; 0
    when noise makes the run with more checkpoints the faster one."""
    per_step = (checkpoints_in(steps, interval_a) - checkpoints_in(steps, interval_b)) / steps
    if per_step == 0 or rate_a <= 0 or rate_b <= 0:
        return None
    return max(0.0, (1 / rate_a - 1 / rate_b) / per_step)


def stall_fraction(stall_s: float | None, interval_steps: int, none_steps_per_s: float) -> float | None:
    """Stall per checkpoint over the interval's training time (at the bare loop's rate)."""
    if stall_s is None or none_steps_per_s <= 0:
        return None
    return stall_s / (interval_steps / none_steps_per_s)


@dataclass(frozen=True)
class ArmRun:
    steps_per_s: float
    # Measured per checkpoint (median over the run's checkpoints); Ray native only.
    stall_s: float | None = None
    checkpoints: int = 0
    checkpoint_bytes: int | None = None


def figures(
    runs: dict[tuple[str, str], list[ArmRun]], intervals: dict[str, int], steps: int, rounds: int
) -> dict[str, Any]:
    """The flat figures of a benchmark: rates (medians), ratios to none (median of the
    per-round ratios), stalls and their fractions of the interval."""
    none = [r.steps_per_s for r in runs[("none", "-")]]
    none_rate = statistics.median(none)
    out: dict[str, Any] = {
        "steps": steps,
        "rounds": rounds,
        "workers": WORKERS,
        "job": "digits",
        "high_interval_steps": intervals["high"],
        "realistic_interval_steps": intervals["realistic"],
        "steps_per_s_none": round(none_rate, 2),
    }
    rates: dict[tuple[str, str], float] = {}
    for arm in CHECKPOINTING:
        for cadence in CADENCES:
            rs = [r.steps_per_s for r in runs[(arm, cadence)]]
            rates[(arm, cadence)] = statistics.median(rs)
            out[f"steps_per_s_{arm}_{cadence}"] = round(rates[(arm, cadence)], 2)
            out[f"steps_ratio_{arm}_{cadence}"] = _round(median_ratio(rs, none))
    for cadence in CADENCES:
        native = [r.steps_per_s for r in runs[("ray_native", cadence)]]
        ours = [r.steps_per_s for r in runs[("async", cadence)]]
        suffix = "" if cadence == "realistic" else "_high"
        out[f"steps_ratio_vs_ray_native{suffix}"] = _round(median_ratio(ours, native))
        sync = [r.steps_per_s for r in runs[("sync", cadence)]]
        out[f"steps_ratio_sync_vs_ray_native_{cadence}"] = _round(median_ratio(sync, native))
    for arm in CHECKPOINTING:
        estimated = stall_from_cadences(
            rates[(arm, "high")], intervals["high"], rates[(arm, "realistic")], intervals["realistic"], steps
        )
        out[f"stall_s_{arm}_estimated"] = _round(estimated, 5)
        measured_everywhere = True
        for cadence in CADENCES:
            suffix = "" if cadence == "realistic" else "_high"
            measured = [r.stall_s for r in runs[(arm, cadence)] if r.stall_s is not None]
            measured_everywhere &= bool(measured)
            stall = statistics.median(measured) if measured else estimated
            out[f"stall_s_{arm}{suffix}"] = _round(stall, 5)
            out[f"stall_frac_{arm}{suffix}"] = _round(stall_fraction(stall, intervals[cadence], none_rate), 5)
        out[f"stall_measured_{arm}"] = measured_everywhere
        if arm == "ray_native":
            sizes = [r.checkpoint_bytes for r in runs[(arm, "high")] if r.checkpoint_bytes]
            out["checkpoint_bytes"] = max(sizes) if sizes else None
    out["stall_ours_is_estimate"] = not (out["stall_measured_async"] and out["stall_measured_sync"])
    return out


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def table(fig: dict[str, Any]) -> str:
    """One table: steps/s per arm and cadence, ratio to none, stall per checkpoint."""
    intervals = {"high": fig["high_interval_steps"], "realistic": fig["realistic_interval_steps"]}
    none_rate = fig["steps_per_s_none"]
    head = f"{'arm':<12}{'cadence':<11}{'interval':>9}{'steps/s':>9}{'/ none':>8}{'stall/ckpt':>12}{'/ interval':>11}"
    lines = [head, f"{'none':<12}{'-':<11}{'-':>9}{none_rate:>9.1f}{1.0:>8.3f}{'-':>12}{'-':>11}"]
    for arm in CHECKPOINTING:
        for cadence in CADENCES:
            suffix = "" if cadence == "realistic" else "_high"
            stall = fig[f"stall_s_{arm}{suffix}"]
            mark = "" if fig[f"stall_measured_{arm}"] else "~"  # estimated from the two cadences
            frac = stall_fraction(stall, intervals[cadence], none_rate)
            stall_txt = "-" if stall is None else f"{mark}{stall * 1000:.1f} ms"
            frac_txt = "-" if frac is None else f"{mark}{frac * 100:.2f}%"
            r = fig[f"steps_ratio_{arm}_{cadence}"]
            lines.append(
                f"{LABELS[arm]:<12}{cadence:<11}{intervals[cadence]:>9}{fig[f'steps_per_s_{arm}_{cadence}']:>9.1f}"
                f"{'-' if r is None else f'{r:.3f}':>8}{stall_txt:>12}{frac_txt:>11}"
            )
    return "\n".join(lines)


def verdicts(fig: dict[str, Any]) -> list[str]:
    def met(ok: bool) -> str:
        return "met" if ok else "not met"

    lines = []
    a = fig["steps_ratio_async_realistic"]
    if a is not None:
        lines.append(f"ours async / none, realistic cadence: {a:.3f} (goal >= {ASYNC_GOAL}: {met(a >= ASYNC_GOAL)})")
    for cadence in CADENCES:
        keys = {
            "async": "steps_ratio_vs_ray_native" + ("" if cadence == "realistic" else "_high"),
            "sync": f"steps_ratio_sync_vs_ray_native_{cadence}",
        }
        for arm, key in keys.items():
            v = fig[key]
            if v is not None:
                lines.append(f"ours {arm} / Ray native, {cadence} cadence: {v:.3f} (goal >= 1: {met(v >= 1.0)})")
    for arm in CHECKPOINTING:
        f = fig[f"stall_frac_{arm}"]
        if f is not None:
            how = "measured" if fig[f"stall_measured_{arm}"] else "estimated from the two cadences"
            lines.append(
                f"stall / interval, {LABELS[arm]}, realistic cadence: {f * 100:.2f}% ({how}; "
                f"goal <= {STALL_GOAL:.0%}: {met(f <= STALL_GOAL)})"
            )
    return lines


# --- the bare arms: none and Ray native (run on a Ray Train worker) --------------------
def bare_train(config: dict[str, Any]) -> None:
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
    steps, interval = int(config["steps"]), int(config["interval"])  # interval 0: no checkpoints
    stalls: list[float] = []
    size = 0
    t0 = time.time()
    for step in range(1, steps + 1):
        opt.zero_grad(set_to_none=True)
        loss = w.loss(ddp, w.batch(step, rank, world))
        loss.backward()
        opt.step()
        if interval and (step % interval == 0 or step == steps):
            # As Ray's checkpointing guide shows: rank 0 writes, every rank reports
            # (report is a barrier), the default upload mode (synchronous).
            t = time.perf_counter()
            metrics = {"step": step, "loss": float(loss.item())}
            with tempfile.TemporaryDirectory() as tmp:
                checkpoint = None
                if rank == 0:
                    torch.save(
                        {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()},
                        os.path.join(tmp, "checkpoint.pt"),
                    )
                    size = os.path.getsize(os.path.join(tmp, "checkpoint.pt"))
                    checkpoint = ray.train.Checkpoint.from_directory(tmp)
                ray.train.report(metrics, checkpoint=checkpoint)
            stalls.append(time.perf_counter() - t)
    elapsed = time.time() - t0
    if rank == 0:
        record = {"steps_per_s": steps / elapsed, "stalls_s": stalls, "checkpoint_bytes": size}
        Path(config["out"]).write_text(json.dumps(record))


def use_token_of(cluster_env: dict[str, str]) -> None:
    """This driver's Ray token: the cluster's own (the local provider turns Ray's token auth
    on, a new token per cluster). Ray caches the token it read for the process's life, so
    the second round's cluster would get the first one's without the reset."""
    from ray._raylet import AuthenticationTokenLoader

    os.environ.pop("RAY_AUTH_TOKEN", None)  # it would win over the cluster's file
    os.environ.update({k: v for k, v in cluster_env.items() if k.startswith("RAY_AUTH")})
    AuthenticationTokenLoader.instance().reset_cache()


class BareCluster:
    """One local-provider cluster per round for the bare arms, torn down before ours run
    (an idle cluster would take CPU from them)."""

    def __enter__(self) -> BareCluster:
        ray_client_env()
        import ray

        from orchestrator.wire.spec import TRAIN_ENV
        from providers.base import RegionSpec
        from providers.local.provider import LocalProvider

        self.provider = LocalProvider()
        name = f"bench-bare-{time.time_ns()}"
        self.cluster = self.provider.launch(RegionSpec("bench", "file:///tmp", 2), name, 60, env=TRAIN_ENV)
        try:
            os.environ.update(TRAIN_ENV)
            use_token_of(self.provider.cluster_env(self.cluster))
            ray.init(address=self.cluster.address, log_to_driver=False)
        except BaseException:
            self.provider.teardown(self.cluster)
            raise
        self.runs = 0
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        ray.shutdown()
        self.provider.teardown(self.cluster)

    def run(self, steps: int, interval: int) -> ArmRun:
        from ray.train import CheckpointConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        self.runs += 1
        base = self.cluster.info["temp_dir"]
        out = f"{base}/rate-{self.runs}"
        trainer = TorchTrainer(
            bare_train,
            train_loop_config={"steps": steps, "interval": interval, "out": out},
            scaling_config=ScalingConfig(num_workers=WORKERS, resources_per_worker={"CPU": 1.0}),
            torch_config=TorchConfig(backend="gloo"),
            run_config=RunConfig(
                name=f"bare-{self.runs}",
                storage_path=f"{base}/train",
                checkpoint_config=CheckpointConfig(num_to_keep=KEEP_LAST),
            ),
        )
        trainer.fit()
        record = json.loads(Path(out).read_text())
        stalls = record["stalls_s"]
        return ArmRun(
            steps_per_s=float(record["steps_per_s"]),
            stall_s=statistics.median(stalls) if stalls else None,
            checkpoints=len(stalls),
            checkpoint_bytes=int(record["checkpoint_bytes"]) or None,
        )


def orchestrated_run(steps: int, run_id: str, interval: int, async_upload: bool) -> ArmRun:
    result, _ = orchestrate(
        temp_home(),
        run_id,
        f"job.steps={steps}",
        f"checkpoint.interval_steps={interval}",
        f"checkpoint.async_upload={'true' if async_upload else 'false'}",
    )
    stall = result.get("checkpoint_stall_s")  # timed by the runtime around each save, rank 0
    return ArmRun(
        steps_per_s=float(result["train_steps_per_s"]),
        stall_s=float(stall) if isinstance(stall, int | float) else None,
        checkpoints=checkpoints_in(steps, interval),
    )


def main() -> None:
    args = parse_args()
    runs: dict[tuple[str, str], list[ArmRun]] = {("none", "-"): []}
    runs.update({(arm, c): [] for arm in CHECKPOINTING for c in CADENCES})
    intervals = {"high": args.interval, "realistic": args.realistic_interval or 0}

    def note(arm: str, cadence: str, r: ArmRun) -> None:
        runs[(arm, cadence)].append(r)
        stall = "" if r.stall_s is None else f", stall {r.stall_s * 1000:.1f} ms over {r.checkpoints} checkpoints"
        print(f"  {LABELS[arm]:<11} {cadence:<10} {r.steps_per_s:8.1f} steps/s{stall}", flush=True)

    for i in range(args.rounds):
        print(f"round {i + 1}:", flush=True)
        with BareCluster() as bare:
            note("none", "-", bare.run(args.steps, 0))
            if not intervals["realistic"]:
                intervals["realistic"] = realistic_interval(runs[("none", "-")][0].steps_per_s, args.realistic_s)
                n = checkpoints_in(args.steps, intervals["realistic"])
                print(
                    f"  realistic cadence: every {intervals['realistic']} steps (~{args.realistic_s:g} s), "
                    f"{n} checkpoint(s) per run, the last step's included"
                )
                if n < 2:
                    print(f"  note: only the last step checkpoints at that cadence; --steps {args.steps} is short")
            for cadence in CADENCES:
                note("ray_native", cadence, bare.run(args.steps, intervals[cadence]))
        for arm in ("async", "sync"):
            for cadence in CADENCES:
                run_id = f"overhead-{i}-{arm}-{cadence}"
                note(arm, cadence, orchestrated_run(args.steps, run_id, intervals[cadence], arm == "async"))
    fig = figures(runs, intervals, args.steps, args.rounds)
    print()
    print(f"steps: {args.steps}, workers: {WORKERS}, rounds: {args.rounds} (medians; ratios: median per round)")
    if fig["checkpoint_bytes"]:
        print(f"checkpoint: {fig['checkpoint_bytes'] / 1e6:.2f} MB (model + optimizer, torch.save)")
    print(table(fig))
    if fig["stall_ours_is_estimate"]:
        print("~: estimated from the two cadences (a runtime that did not report checkpoint_stall_s)")
    est = fig["stall_s_ray_native_estimated"]
    if est is not None:
        print(f"Ray native's stall estimated the same way: {est * 1000:.1f} ms (measured: see the table)")
    for line in verdicts(fig):
        print(line)
    write_json(args.json, fig)
    if args.json:
        print(f"figures: {args.json}")


if __name__ == "__main__":
    main()
