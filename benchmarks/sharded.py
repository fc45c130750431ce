"""Sharded checkpoints (trainer.strategy=fsdp) against whole ones (ddp): memory, stall,
commit, restore and speed, at ``--workers`` (2) on ``local``.

For each job of ``--jobs`` (gpt_large, about 230 MB of model and optimizer state, and
gpt_xl, 1.2 GB), two runs: ddp and fsdp, each with a worker killed at step
``--kill-at`` (``recovery.survivors=off``: the group restarts in place and every rank
restores from the store; with survivors kept they load their own state from memory,
measured by node_loss.py), and prints, fsdp / ddp:

1. ``fsdp_state_bytes_per_rank_ratio``: the parameter and optimizer bytes rank 0 holds
   (result.json's ``state_bytes_per_rank``; goal <= 0.6 at two workers);
2. ``ckpt_stall_ratio_fsdp_vs_ddp``: the median time a checkpoint blocks the training
   loop (each commit's ``stall_s``, of every group of the run, the final step's left out;
   goal <= 1.0);
3. ``ckpt_commit_ratio_fsdp_vs_ddp``: the median time from a snapshot's hand-over to its
   signed manifest (``runtime.checkpoint_committed``'s ``commit_s``; goal <= 0.7: two
   ranks write in parallel);
4. ``restore_ratio_sharded``: the fsdp run's restore after the kill (``train_started``'s
   ``restore_s``: rank 0's choice, from the manifest and one listing, and the load, each
   rank reading, verifying and loading its shards, their overlap counted once; the
   choice runs beside the model's build, which is not counted) / a raw download of the
   same checkpoint's files, all at once (fsspec ``cat_file``, a thread per file; goal
   <= 1.2); ``restore_ratio_ddp``: the same for the ddp run (goal <= 1.2);
5. ``steps_ratio_fsdp_vs_ddp``: training steps per second (the last attempt's rate).

Each arm's restore is also printed by phase (``train_started``'s ``restore_phases``, rank
0's): the choice, the reads (transfer and verification overlap: each file is hashed as it
streams in), of them the hashing alone, deserialising and copying into the model, and
the hand-over of the files rank 0 verified to the other ranks over the collective (one
download for the group), beside the raw download, so what is left of the gap is visible.

``--store s3``: the checkpoints in moto's S3 server on 127.0.0.1 (started here, as the
tests start it; ``cloud=local_cloudstores``) rather than on this machine's disk, so the
raw download is a download over a wire (HTTP, s3fs), not a copy out of the page cache.

``--size`` (e.g. ``3G``): one job, gpt_xl with as many layers as make a checkpoint of
about that many bytes (each layer of d_model 1024 holds 12.6 M parameters: 151 MB of
weights and AdamW moments), for the restore of a large checkpoint.

    python benchmarks/sharded.py [--jobs gpt_large,gpt_xl] [--size 3G] [--store file|s3] [--steps 6]
                                 [--interval 2] [--kill-at 5] [--json PATH]

The unprefixed keys are the last job's; each job's are also written as ``<job>_<key>``.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import orchestrate, temp_home, write_json  # noqa: E402
from orchestrator.runtime.checkpoint.restore_clock import RestoreClock  # noqa: E402

GOALS = {
    "fsdp_state_bytes_per_rank_ratio": ("<=", 0.6),
    "ckpt_stall_ratio_fsdp_vs_ddp": ("<=", 1.0),
    "ckpt_commit_ratio_fsdp_vs_ddp": ("<=", 0.7),
    "restore_ratio_sharded": ("<=", 1.2),
    "restore_ratio_ddp": ("<=", 1.2),
}
# gpt_xl (conf/job/gpt_xl.yaml): a layer's bytes in a checkpoint (12 d_model^2 parameters,
# fp32 weights and AdamW's two moments) and the rest (embeddings, positions).
LAYER_BYTES = 12 * 1024**2 * 12
BASE_BYTES = 2 * 256 * 1024 * 12
# A restore's phases as train_started journals them (rank 0's, its choice first).
PHASES = tuple(RestoreClock().fields(choose_s=0.0))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="gpt_large,gpt_xl", help="comma-separated job configs")
    ap.add_argument("--size", default=None, help="one gpt_xl job with a checkpoint of about this size (e.g. 3G)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--interval", type=int, default=2, help="checkpoint.interval_steps")
    ap.add_argument("--kill-at", type=int, default=5, help="the step at which a worker is killed")
    ap.add_argument("--store", default="file", choices=("file", "s3"), help="where the checkpoints go")
    ap.add_argument("--json", default=None, help="write the figures to this file")
    return ap.parse_args(argv)


def committed(journal: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in journal if e.get("type") == "runtime.checkpoint_committed"]


def commit_times(journal: list[dict[str, Any]]) -> list[float]:
    return [float(e["commit_s"]) for e in committed(journal)]


def stall_times(journal: list[dict[str, Any]], final_step: int) -> list[float]:
    """How long each checkpoint blocked the loop, of every attempt's group (each commit
    carries its stall), but the final step's: under fsdp that snapshot also takes the
    final weights digest, a collective over the whole model that ddp takes after it. (The
    result's ``checkpoint_stall_s`` is the last group's alone: after a kill that restarts
    an fsdp group, only its final checkpoint.)"""
    return [float(e["stall_s"]) for e in committed(journal) if "stall_s" in e and int(e["step"]) != final_step]


def restore_window(journal: list[dict[str, Any]]) -> tuple[float, int, str] | None:
    """(seconds, step, checkpoint url) of the first restore of a run: ``train_started``'s
    ``restore_s`` (rank 0: the choice and the load)."""
    started = first_restore(journal)
    if started is None:
        return None
    return float(started["restore_s"]), int(started["restored_step"]), str(started["restored_from"])


def first_restore(journal: list[dict[str, Any]]) -> dict[str, Any] | None:
    for e in journal:
        if e.get("type") == "runtime.train_started" and e.get("restored_step") and e.get("restore_s") is not None:
            return e
    return None


def restore_phases(journal: list[dict[str, Any]]) -> dict[str, float]:
    """The first restore's phases (rank 0's ``restore_phases``), the known ones only."""
    started = first_restore(journal) or {}
    phases = started.get("restore_phases") or {}
    return {k: float(phases[k]) for k in PHASES if isinstance(phases.get(k), int | float)}


def layers_for(size: str) -> int:
    """gpt_xl's layer count for a checkpoint of about ``size`` bytes (``3G``, ``800M``, ``2e9``)."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    text = size.strip().upper().removesuffix("B")
    try:
        wanted = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise SystemExit(f"--size {size!r}: expected a size such as 3G, 800M or 2e9 (bytes)") from None
    return max(1, round((wanted - BASE_BYTES) / LAYER_BYTES))


def arm_figures(label: str, strategy: str, arm: dict[str, Any]) -> dict[str, Any]:
    """One arm's measures as flat figures, ``<label>_<strategy>_<key>``; its restore's
    phases each a key of their own (``..._restore_read_s``)."""
    out = {f"{label}_{strategy}_{k}": v for k, v in arm.items() if k != "restore_phases"}
    for phase, seconds in (arm.get("restore_phases") or {}).items():
        out[f"{label}_{strategy}_restore_{phase}"] = seconds
    return out


def phase_line(arm: dict[str, Any]) -> str:
    """One line: where an arm's restore went, beside the raw download."""
    phases = arm.get("restore_phases") or {}
    if not phases:
        return "no restore timed"
    words = [f"{k.removesuffix('_s').replace('_', ' ')} {v:.2f} s" for k, v in phases.items()]
    raw = arm.get("raw_s")
    return ", ".join(words) + ("" if raw is None else f"; raw download {raw:.2f} s")


def raw_download_s(folder: str, options: dict[str, Any] | None = None) -> float:
    """Every file of a checkpoint folder read at once, a thread per file, as fsspec reads it."""
    from recovery.storage import open_fs

    fs, root = open_fs(folder, options)
    names = [p for p in fs.ls(root, detail=False) if not p.endswith("MANIFEST.json")]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        sum(len(b) for b in pool.map(fs.cat_file, names))
    return time.perf_counter() - t0


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else round(a / b, 3)


def figures_of(ddp: dict[str, Any], fsdp: dict[str, Any]) -> dict[str, Any]:
    """The ratios from each arm's measures (``state_bytes``, ``stall_s``, ``commit_s``,
    ``steps_per_s``; the fsdp arm's ``restore_s`` and ``raw_s``)."""
    return {
        "fsdp_state_bytes_per_rank_ratio": ratio(fsdp["state_bytes"], ddp["state_bytes"]),
        "ckpt_stall_ratio_fsdp_vs_ddp": ratio(fsdp["stall_s"], ddp["stall_s"]),
        "ckpt_commit_ratio_fsdp_vs_ddp": ratio(fsdp["commit_s"], ddp["commit_s"]),
        "restore_ratio_sharded": ratio(fsdp.get("restore_s"), fsdp.get("raw_s")),
        "restore_ratio_ddp": ratio(ddp.get("restore_s"), ddp.get("raw_s")),
        "steps_ratio_fsdp_vs_ddp": ratio(fsdp["steps_per_s"], ddp["steps_per_s"]),
    }


def measure(
    home: str, job: str, strategy: str, args: argparse.Namespace, *extra: str, s3: str | None = None
) -> dict[str, Any]:
    """One arm; ``s3``: the endpoint of the S3 server the checkpoints go to (None: files)."""
    stores = ("cloud=local_cloudstores",) if s3 else ()
    result, journal = orchestrate(
        home,
        f"sharded-{job}-{strategy}",
        *stores,
        f"job={job}",
        *extra,
        f"job.steps={args.steps}",
        f"checkpoint.interval_steps={args.interval}",
        "checkpoint.keep_last=2",
        f"trainer.workers={args.workers}",
        f"trainer.strategy={strategy}",
        f"chaos.faults=[{{kind:kill_worker,at_step:{args.kill_at}}}]",
        # The group restarts whole and every rank restores from the store: the restore
        # measured against a raw download (survivors would load their own from memory).
        "recovery.survivors=off",
    )
    commits = commit_times(journal)
    stalls = stall_times(journal, args.steps)
    out: dict[str, Any] = {
        "state_bytes": result.get("state_bytes_per_rank"),
        "stall_s": statistics.median(stalls) if stalls else None,
        "commit_s": statistics.median(commits) if commits else None,
        "steps_per_s": result.get("train_steps_per_s"),
        "checkpoint_bytes": max((int(e["bytes"]) for e in committed(journal)), default=0),
    }
    window = restore_window(journal)
    if window is not None:
        out["restore_s"], out["restored_step"], url = window
        out["restore_phases"] = restore_phases(journal)
        out["raw_s"] = raw_download_s(url, {"endpoint_url": s3} if s3 else None)
    return out


@contextlib.contextmanager
def s3_stores(wanted: bool) -> Iterator[str | None]:
    """With ``wanted``: moto's S3 servers for local_cloudstores' two S3 regions, their
    buckets made and the dummy credentials set; the first one's endpoint. Else None."""
    if not wanted:
        yield None
        return
    from tests.support.servers import S3_ENV, make_bucket, scoped_env, start_moto

    servers = [start_moto(), start_moto()]
    try:
        for server, bucket in zip(servers, ("orch-a", "orch-b"), strict=True):
            make_bucket(server, bucket)
        env = {**S3_ENV, "ORCH_LOCAL_S3_A": servers[0].endpoint, "ORCH_LOCAL_S3_B": servers[1].endpoint}
        with scoped_env(env):
            yield servers[0].endpoint
    finally:
        for server in servers:
            server.stop()


def verdict(key: str, value: float | None) -> str:
    if key not in GOALS or value is None:
        return ""
    op, goal = GOALS[key]
    met = value <= goal if op == "<=" else value >= goal
    return f"goal {op} {goal}: {'met' if met else 'NOT met'}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    figures: dict[str, Any] = {"workers": args.workers, "steps": args.steps}
    jobs = [(j.strip(), j.strip(), ()) for j in args.jobs.split(",") if j.strip()]
    if args.size:
        layers = layers_for(args.size)
        jobs = [(f"gpt_xl_{args.size.strip().lower()}", "gpt_xl", (f"job.params.n_layer={layers}",))]
    for label, job, extra in jobs:
        home = temp_home()
        try:
            with s3_stores(args.store == "s3") as s3:
                arms = {s: measure(home, job, s, args, *extra, s3=s3) for s in ("ddp", "fsdp")}
        finally:
            shutil.rmtree(home, ignore_errors=True)  # gpt_xl's stores hold gigabytes
        got = figures_of(arms["ddp"], arms["fsdp"])
        mib = arms["ddp"]["checkpoint_bytes"] / 2**20
        print(f"== {label} at {args.workers} workers ({mib:.0f} MiB per checkpoint)")
        for strategy, arm in arms.items():
            print(f"   {strategy}: " + ", ".join(f"{k}={v}" for k, v in arm.items() if k != "restore_phases"))
            print(f"   {strategy} restore: {phase_line(arm)}")
        for key, value in got.items():
            print(f"   {key:34} {value}   {verdict(key, value)}")
        figures.update(got)
        figures.update({f"{label}_{k}": v for k, v in got.items()})
        figures.update({k: v for s, arm in arms.items() for k, v in arm_figures(label, s, arm).items()})
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
