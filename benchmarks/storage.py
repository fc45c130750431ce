"""Object storage: upload throughput, training with async checkpoints, replication lag.

Starts its own moto S3 servers and fake-gcs-server on 127.0.0.1 (as the tests do)
and prints ratios measured in this one run:

1. checkpoint upload (CheckpointStore.put + commit) / raw fsspec put_file of the
   same bytes to the same server (goal >= 0.9);
2. training steps/s with async checkpointing every 50 steps / without
   checkpoints (goal >= 0.97), next to the same with synchronous checkpointing;
3. replication lag (journal) / raw copy of the same checkpoint between the same
   servers (goal <= 1.2).

    python benchmarks/storage.py [--mb 48] [--steps 3000]
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from benchmarks.common import orchestrate, temp_home  # noqa: E402
from recovery.storage import open_fs  # noqa: E402
from recovery.store import CheckpointStore  # noqa: E402
from servers import S3_ENV, make_bucket, start_fake_gcs, start_moto  # noqa: E402


def upload_ratio(endpoint: str, mb: int, rounds: int = 3) -> tuple[float, float]:
    files = {f"shard-{i}.pt": os.urandom(mb * 1024 * 1024 // 3) for i in range(3)}
    tmp = tempfile.mkdtemp(prefix="bench-upload-")
    for name, data in files.items():
        Path(tmp, name).write_bytes(data)
    fs, _ = open_fs("s3://bench-up", {"endpoint_url": endpoint})
    store = CheckpointStore(
        "s3://bench-up/ours", region="s3", storage_options={"endpoint_url": endpoint}, key=secrets.token_bytes(32)
    )
    ours, raw = [], []
    for r in range(rounds):
        t0 = time.perf_counter()
        for name in files:
            fs.put_file(f"{tmp}/{name}", f"bench-up/raw/{r}/{name}")
        raw.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        entries = [store.put("bench", r + 1, name, data) for name, data in files.items()]
        store.commit("bench", r + 1, 1, entries)
        ours.append(time.perf_counter() - t0)
    total = sum(len(d) for d in files.values()) / 1e6
    return total / statistics.median(ours), total / statistics.median(raw)


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=48)
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args()
    os.environ.update(S3_ENV)
    a, b, c = start_moto(), start_moto(), start_fake_gcs()
    try:
        for server, bucket in ((a, "orch-a"), (b, "orch-b"), (c, "orch-c"), (a, "bench-up")):
            make_bucket(server, bucket)
        ours, raw = upload_ratio(a.endpoint, args.mb)
        print(f"1. upload {args.mb} MB to moto: ours {ours:.1f} MB/s, raw put_file {raw:.1f} MB/s")
        print(f"   ratio {ours / raw:.3f} (goal >= 0.9)", flush=True)

        env = {"ORCH_LOCAL_S3_A": a.endpoint, "ORCH_LOCAL_S3_B": b.endpoint, "ORCH_LOCAL_GCS_C": c.endpoint}
        os.environ.update(env)
        home = temp_home()
        rates = {}
        journals = {}
        for mode, extra in (
            ("none", [f"checkpoint.interval_steps={args.steps}"]),
            ("async", ["checkpoint.interval_steps=500"]),
            ("sync", ["checkpoint.interval_steps=500", "checkpoint.async_upload=false"]),
            ("async-50", ["checkpoint.interval_steps=50"]),
            ("sync-50", ["checkpoint.interval_steps=50", "checkpoint.async_upload=false"]),
        ):
            result, journal = orchestrate(
                home, f"storage-{mode}", "cloud=local_cloudstores", f"job.steps={args.steps}", *extra
            )
            rates[mode] = float(result["train_steps_per_s"])
            journals[mode] = journal
            print(f"   {mode:>5}: {rates[mode]:.1f} steps/s", flush=True)
        print(
            f"2. every 500 steps: async / none = {rates['async'] / rates['none']:.3f} (goal >= 0.97); "
            f"sync / none = {rates['sync'] / rates['none']:.3f}"
        )
        print(
            f"   every 50 steps:  async / none = {rates['async-50'] / rates['none']:.3f}; "
            f"sync / none = {rates['sync-50'] / rates['none']:.3f}"
        )

        reps = [e for e in journals["async"] if e["type"] == "runtime.replicated"]
        for target, url, opts in (
            ("local-b", "s3://orch-b/stores", {"endpoint_url": b.endpoint}),
            ("local-c", "gs://orch-c/stores", {"endpoint_url": c.endpoint, "token": "anon", "project": "p"}),
        ):
            lags = [e["lag_s"] for e in reps if e["to"] == target]
            copy = raw_copy_s("s3://orch-a/stores", {"endpoint_url": a.endpoint}, url, opts, "storage-async")
            lag = statistics.median(lags)
            print(
                f"3. replication local-a -> {target}: median lag {lag:.3f}s over {len(lags)} copies, "
                f"raw copy {copy:.3f}s, ratio {lag / copy:.2f} (goal <= 1.2)"
            )
    finally:
        for server in (a, b, c):
            server.stop()


if __name__ == "__main__":
    main()
