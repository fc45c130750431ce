"""Object storage: upload throughput, training with async checkpoints, replication lag.

Starts its own moto S3 servers and fake-gcs-server on 127.0.0.1 (as the tests do)
and prints ratios measured in this one run:

1. checkpoint upload (the uploader: files put concurrently, the manifest last) /
   raw fsspec put_file of the same bytes to the same server with the same
   concurrency (goal >= 0.95); with ``--workers N``, the same checkpoint shared by
   N ranks (N processes), as a speed-up over one rank;
2. training steps/s with async checkpointing every 500 steps (``--interval``) /
   without checkpoints (goal >= 0.97), next to the same with synchronous
   checkpointing, and both every 50 steps (``--interval-high``);
3. replication lag (journal) / raw copy of the same checkpoint between the same
   servers, made while the async arm trains, a round every second (goal <= 1.2);
4. restore of the async run's newest checkpoint, from the decision to the state
   loaded (what a worker does: find the newest checkpoint that verifies, reading
   its files once, verified as they stream in, torch.load each) / a raw download
   of the same files (fsspec cat_file) from the same server (goal <= 1.2).

    python benchmarks/storage.py [--mb 48] [--workers 1] [--steps 3000] [--job digits] [--json PATH]

``--job gpt_large`` trains the large-state job (about 230 MB of model and optimizer
state per checkpoint): a step takes seconds there, so pass small ``--steps`` with
``--interval``/``--interval-high`` to match, and ``--modes`` to train fewer arms.
``--json PATH`` writes the figures (see ``figures``).
"""

from __future__ import annotations

import argparse
import io
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import orchestrate, temp_home, write_json  # noqa: E402
from recovery.keys import controller_keys  # noqa: E402
from recovery.storage import open_fs  # noqa: E402
from recovery.store import CheckpointStore  # noqa: E402
from tests.support.servers import S3_ENV, make_bucket, start_fake_gcs, start_moto  # noqa: E402


def _share_rank(
    endpoint: str, prefix: str, step: int, files: dict[str, bytes], digests: dict[str, str], go: Any
) -> None:
    """Another rank of a shared upload, in its own process: put its share once told to."""
    from orchestrator.runtime.checkpoint.share_upload import ShareUpload

    keys = controller_keys(b"k" * 32, "bench")
    store = CheckpointStore(prefix, region="s3", storage_options={"endpoint_url": endpoint}, key=keys)
    share = ShareUpload(store, "bench", 1)
    store.all_steps("bench")  # the client warm, as a training run's is by its second checkpoint
    go.wait()
    share.submit(step, files, digests)
    share.wait(600)


def upload_ratio(endpoint: str, mb: int, rounds: int = 3, workers: int = 1) -> dict[str, float]:
    """MB/s of a checkpoint upload (``AsyncCheckpointer``: the files put concurrently, the
    manifest last), of raw ``put_file`` of the same files with the same concurrency, and,
    with ``workers`` > 1, of the same upload shared by that many ranks (ranks > 0 in
    processes of their own, as Ray Train's workers are; the files split as
    ``assign_shares`` splits a checkpoint's)."""
    import multiprocessing
    from concurrent.futures import ThreadPoolExecutor

    from orchestrator.runtime.checkpoint.background import AsyncCheckpointer
    from orchestrator.runtime.checkpoint.puts import UPLOAD_THREADS
    from orchestrator.runtime.checkpoint.share_plan import assign_shares, sha256_all

    files = {f"shard-{i}.pt": os.urandom(mb * 1024 * 1024 // 3) for i in range(3)}
    tmp = tempfile.mkdtemp(prefix="bench-upload-")
    for name, data in files.items():
        Path(tmp, name).write_bytes(data)
    fs, _ = open_fs("s3://bench-up", {"endpoint_url": endpoint})
    key = controller_keys(secrets.token_bytes(32), "bench-up")

    stores: dict[str, CheckpointStore] = {}

    def store(prefix: str) -> CheckpointStore:
        # One client per arm, warm, as a training run's is by its second checkpoint.
        if prefix not in stores:
            opts = {"endpoint_url": endpoint}
            stores[prefix] = CheckpointStore(f"s3://bench-up/{prefix}", region="s3", storage_options=opts, key=key)
            stores[prefix].all_steps("bench")
        return stores[prefix]

    def ours(prefix: str, step: int, world: int) -> float:
        ckpt = AsyncCheckpointer([store(prefix)], "bench", 1, keep_last=rounds + 1)
        owner = assign_shares({n: len(d) for n, d in files.items()}, world)
        shares = {n: r for n, r in owner.items() if r != 0}
        digests = sha256_all(files, shares)
        ctx = multiprocessing.get_context("spawn")
        go = ctx.Event()
        others = [
            ctx.Process(
                target=_share_rank,
                args=(
                    endpoint,
                    f"s3://bench-up/{prefix}",
                    step,
                    {n: files[n] for n in shares if shares[n] == r},
                    digests,
                    go,
                ),
            )
            for r in range(1, world)
        ]
        for proc in others:
            proc.start()
        time.sleep(2.0)  # every arm starts on an idle server (and the other ranks' imports are done)
        go.set()
        t0 = time.perf_counter()
        ckpt.submit(step, files, {}, shares=shares, digests=digests)
        while ckpt.committed_step != step and ckpt.pending:  # until the manifest is in, not retention after
            time.sleep(0.001)
        took = time.perf_counter() - t0
        ckpt.wait(timeout_s=600)
        for proc in others:
            proc.join(timeout=60)
        if ckpt.last_share is not None and ckpt.last_share.taken:
            print(f"   (shared, round {step}: rank 0 put {ckpt.last_share.taken} itself after its wait)")
        return took

    raw, one, shared = [], [], []
    with ThreadPoolExecutor(max_workers=UPLOAD_THREADS) as pool:
        for r in range(rounds):
            time.sleep(2.0)
            t0 = time.perf_counter()
            list(pool.map(lambda n, r=r: fs.put_file(f"{tmp}/{n}", f"bench-up/raw/{r}/{n}"), files))
            raw.append(time.perf_counter() - t0)
            one.append(ours("ours", r + 1, 1))
            if workers > 1:
                shared.append(ours(f"shared{workers}", r + 1, workers))
    total = sum(len(d) for d in files.values()) / 1e6
    out = {"ours": total / statistics.median(one), "raw": total / statistics.median(raw)}
    if shared:
        out["shared"] = total / statistics.median(shared)
    return out


def raw_copy_s(src_url: str, src_opts: dict, dst_url: str, dst_opts: dict, run_id: str) -> float:
    src = CheckpointStore(src_url, region="src", storage_options=src_opts)
    dst_fs, dst_root = open_fs(dst_url, dst_opts)
    # Only the copy's time is measured: the newest commit, trusted or not (no run key here).
    m = src.manifest(run_id, max(src.committed_steps(run_id)))
    assert m is not None
    times = []
    for i in range(3):
        t0 = time.perf_counter()
        for f in m.files:
            data = src.fs.cat_file(f"{src.step_path(run_id, m.step)}/{f.name}")
            dst_fs.pipe_file(f"{dst_root}/rawcopy/{i}/{f.name}", data)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class LoadedCopies(threading.Thread):
    """Raw copies of the newest commit of ``run_id`` to each target, one after another with
    a pause between rounds, while the run trains: the raw copy under the same load as the
    replication it is compared with (on an idle machine afterwards it is 2-3x faster)."""

    def __init__(self, src_url: str, src_opts: dict, targets: dict[str, tuple[str, dict]], run_id: str) -> None:
        super().__init__(name="loaded-copies", daemon=True)
        self.src = CheckpointStore(src_url, region="src", storage_options=src_opts)
        self.targets = {t: open_fs(url, opts) for t, (url, opts) in targets.items()}
        self.run_id = run_id
        self.times: dict[str, list[float]] = {t: [] for t in targets}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                steps = self.src.committed_steps(self.run_id)
                m = self.src.manifest(self.run_id, steps[-1]) if steps else None
            except Exception:  # the run's store listing raced its retention: try again
                continue
            if m is None:
                continue
            for target, (fs, root) in self.targets.items():
                t0 = time.perf_counter()
                try:
                    for f in m.files:
                        data = self.src.fs.cat_file(f"{self.src.step_path(self.run_id, m.step)}/{f.name}")
                        fs.pipe_file(f"{root}/loadedcopy/{f.name}", data)
                except FileNotFoundError:
                    continue  # retention removed the step mid-copy
                self.times[target].append(time.perf_counter() - t0)


def restore_s(src_url: str, opts: dict[str, Any], run_id: str, rounds: int = 3) -> tuple[float, float, int]:
    """(restore, raw download, bytes): medians over ``rounds`` of the newest checkpoint of ``run_id``.

    The run's key never leaves its controller, so its newest commit's bytes are
    committed again under a key of this benchmark's (same files, same server) and
    restored from there. Restore mirrors a worker's (orchestrator/runtime/loop/worker.py
    ``_choose`` and train_loop.py ``restore``): ``load_newest`` (every file read once,
    in parallel ranges, hashed as it streams in, the bytes kept), then ``torch.load``.
    The raw download is one ``cat_file`` per file, one after another.
    """
    import torch

    from recovery.replication import load_newest

    src = CheckpointStore(src_url, region="src", storage_options=opts)
    m = src.manifest(run_id, max(src.committed_steps(run_id)))
    assert m is not None
    files = {f.name: src.fs.cat_file(f"{src.step_path(run_id, m.step)}/{f.name}") for f in m.files}
    keys = controller_keys(secrets.token_bytes(32), "restore")
    store = CheckpointStore(f"{src_url}-restore", region="src", storage_options=opts, key=keys)
    entries = [store.put("restore", m.step, name, data, 1) for name, data in files.items()]
    store.commit("restore", m.step, 1, entries)
    ours, raw = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for name in files:
            store.fs.cat_file(f"{store.step_path('restore', m.step)}/{name}")
        raw.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        newest = load_newest("restore", [store], on_skip=_no_skip, keep=lambda name: True)
        assert newest is not None and newest.manifest.step == m.step
        for data in newest.files.values():
            torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        ours.append(time.perf_counter() - t0)
    return statistics.median(ours), statistics.median(raw), sum(len(d) for d in files.values())


def _no_skip(store: CheckpointStore, step: int, reason: str) -> None:
    raise AssertionError(f"the benchmark's own checkpoint step {step} did not verify: {reason}")


# The training arms: name -> (checkpoint overrides); {i}: --interval, {h}: --interval-high, {n}: --steps.
MODES = {
    "none": ["checkpoint.interval_steps={n}"],
    "async": ["checkpoint.interval_steps={i}"],
    "sync": ["checkpoint.interval_steps={i}", "checkpoint.async_upload=false"],
    "async-50": ["checkpoint.interval_steps={h}"],
    "sync-50": ["checkpoint.interval_steps={h}", "checkpoint.async_upload=false"],
}


def figures(
    upload: dict[str, float] | None,
    rates: dict[str, float],
    replication: dict[str, tuple[float, float]],
    restore: tuple[float, float, int] | None,
) -> dict[str, Any]:
    """The flat figures of one run. ``upload``: MB/s of ours, raw and (``--workers`` > 1)
    shared (``upload_shared_speedup``: shared / ours with one rank); ``rates``: steps/s per
    arm of MODES that ran; ``replication``: target region -> (median lag, raw copy) s;
    ``restore``: (ours, raw) s and bytes. Keys: ``upload_ratio``, ``steps_ratio_async``
    (``--interval``, "every 500 steps"), ``steps_ratio_sync``, ``steps_ratio_async_high``
    and ``steps_ratio_sync_high`` (``--interval-high``, "every 50"), ``replication_ratio``
    (the worse target) and ``replication_ratio_<region>``, ``restore_ratio``, with
    the times and rates they come from. Pure: the tests drive it with records."""
    out: dict[str, Any] = {}
    if upload is not None:
        ours, raw = upload["ours"], upload["raw"]
        out |= {"upload_mb_s": round(ours, 2), "upload_raw_mb_s": round(raw, 2), "upload_ratio": round(ours / raw, 3)}
        if "shared" in upload:
            out["upload_shared_mb_s"] = round(upload["shared"], 2)
            out["upload_shared_speedup"] = round(upload["shared"] / ours, 3)
    for mode, rate in rates.items():
        out[f"steps_per_s_{mode.replace('-50', '_high')}"] = round(rate, 2)
    for mode in MODES:
        if mode != "none" and mode in rates and rates.get("none"):
            out[f"steps_ratio_{mode.replace('-50', '_high')}"] = round(rates[mode] / rates["none"], 3)
    for target, (lag, copy) in replication.items():
        key = target.replace("-", "_")
        out[f"replication_lag_{key}_s"] = round(lag, 3)
        out[f"replication_raw_{key}_s"] = round(copy, 3)
        out[f"replication_ratio_{key}"] = round(lag / copy, 3)
    if replication:
        out["replication_ratio"] = max(out[f"replication_ratio_{t.replace('-', '_')}"] for t in replication)
    if restore is not None:
        ours_s, raw_s, size = restore
        out |= {
            "restore_s": round(ours_s, 3),
            "restore_raw_s": round(raw_s, 3),
            "restore_ratio": round(ours_s / raw_s, 3),
            "restore_mb": round(size / 1e6, 2),
        }
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=48, help="MB of random files the upload measure puts (0: skip it)")
    ap.add_argument(
        "--workers", type=int, default=1, help="ranks sharing the upload measure's checkpoint (1: rank 0 alone)"
    )
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--job", default="digits", help="the job config (conf/job/NAME.yaml), e.g. gpt_large")
    ap.add_argument("--interval", type=int, default=500, help="checkpoint.interval_steps of the async and sync arms")
    ap.add_argument("--interval-high", type=int, default=50, help="the same of the async-50 and sync-50 arms")
    ap.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"the training arms to run, comma-separated, out of {','.join(MODES)} (none and async are needed "
        "for the ratios, replication and restore)",
    )
    ap.add_argument("--json", metavar="PATH", help="write the figures and ratios there (flat keys)")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        ap.error(f"--modes: expected some of {','.join(MODES)}, got {args.modes!r}")
    args.modes = modes
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.update(S3_ENV)
    a, b, c = start_moto(), start_moto(), start_fake_gcs()
    try:
        for server, bucket in ((a, "orch-a"), (b, "orch-b"), (c, "orch-c"), (a, "bench-up")):
            make_bucket(server, bucket)
        upload = None
        if args.mb > 0:
            upload = upload_ratio(a.endpoint, args.mb, workers=args.workers)
            ours, raw = upload["ours"], upload["raw"]
            print(
                f"1. upload {args.mb} MB to moto: ours {ours:.1f} MB/s, raw put_file {raw:.1f} MB/s (both concurrent)"
            )
            print(f"   ratio {ours / raw:.3f} (goal >= 0.95)", flush=True)
            if "shared" in upload:
                print(
                    f"   shared by {args.workers} ranks: {upload['shared']:.1f} MB/s, "
                    f"{upload['shared'] / ours:.2f}x one rank",
                    flush=True,
                )

        env = {"ORCH_LOCAL_S3_A": a.endpoint, "ORCH_LOCAL_S3_B": b.endpoint, "ORCH_LOCAL_GCS_C": c.endpoint}
        os.environ.update(env)
        home = temp_home()
        rates: dict[str, float] = {}
        journals = {}
        targets = {
            "local-b": ("s3://orch-b/stores", {"endpoint_url": b.endpoint}),
            "local-c": ("gs://orch-c/stores", {"endpoint_url": c.endpoint, "token": "anon", "project": "p"}),
        }
        loaded = LoadedCopies("s3://orch-a/stores", {"endpoint_url": a.endpoint}, targets, "storage-async")
        for mode in args.modes:
            extra = [o.format(n=args.steps, i=args.interval, h=args.interval_high) for o in MODES[mode]]
            if mode == "async":
                loaded.start()
            try:
                result, journal = orchestrate(
                    home,
                    f"storage-{mode}",
                    "cloud=local_cloudstores",
                    f"job={args.job}",
                    f"job.steps={args.steps}",
                    *extra,
                )
            finally:
                if mode == "async":
                    loaded.stop.set()
            rates[mode] = float(result["train_steps_per_s"])
            journals[mode] = journal
            print(f"   {mode:>5}: {rates[mode]:.1f} steps/s", flush=True)
        if "none" in rates:
            for head, pair in (
                (f"2. every {args.interval} steps: ", ("async", "sync")),
                (f"   every {args.interval_high} steps:  ", ("async-50", "sync-50")),
            ):
                parts = [
                    f"{m.removesuffix('-50')} / none = {rates[m] / rates['none']:.3f}"
                    + (" (goal >= 0.97)" if m == "async" else "")
                    for m in pair
                    if m in rates
                ]
                if parts:
                    print(head + "; ".join(parts))

        replication: dict[str, tuple[float, float]] = {}
        restore = None
        if "async" in journals:
            reps = [e for e in journals["async"] if e["type"] == "runtime.replicated"]
            for target, (url, opts) in targets.items():
                lags = [e["lag_s"] for e in reps if e["to"] == target]
                if not lags:
                    print(f"3. replication local-a -> {target}: no copies in the journal")
                    continue
                idle = raw_copy_s("s3://orch-a/stores", {"endpoint_url": a.endpoint}, url, opts, "storage-async")
                under_load = loaded.times[target]
                # The raw copy under the training's load when the run lasted long enough for one.
                copy = statistics.median(under_load) if under_load else idle
                lag = statistics.median(lags)
                replication[target] = (lag, copy)
                print(
                    f"3. replication local-a -> {target}: median lag {lag:.3f}s over {len(lags)} copies, "
                    f"raw copy {copy:.3f}s under load ({len(under_load)} copies; idle afterwards {idle:.3f}s), "
                    f"ratio {lag / copy:.2f} (goal <= 1.2)"
                )
            restore = restore_s("s3://orch-a/stores", {"endpoint_url": a.endpoint}, "storage-async")
            ours_s, raw_s, size = restore
            print(
                f"4. restore of {size / 1e6:.1f} MB from moto: ours {ours_s:.3f}s, raw download {raw_s:.3f}s, "
                f"ratio {ours_s / raw_s:.2f} (goal <= 1.2)"
            )
        write_json(
            args.json,
            {
                "job": args.job,
                "steps": args.steps,
                "upload_mb": args.mb,
                "interval_steps": args.interval,
                "interval_steps_high": args.interval_high,
                **figures(upload, rates, replication, restore),
            },
        )
    finally:
        for server in (a, b, c):
            server.stop()


if __name__ == "__main__":
    main()
