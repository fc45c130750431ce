"""The checkpoint store and replication on real object-storage servers (S3 and GCS)."""

from __future__ import annotations

import mmap
import os
import signal
import tempfile
import time

import pytest

from recovery.keys import controller_keys
from recovery.replication import replicate, sync_newest
from recovery.store import CheckpointStore, StoreError, sha256_hex
from tests.support.servers import S3_ENV, make_bucket, scoped_env, start_fake_gcs, start_moto

RUN = "objrun"


@pytest.fixture(scope="module")
def servers():
    with scoped_env(S3_ENV):
        s3, gcs = start_moto(), start_fake_gcs()
        try:
            make_bucket(s3, "orch-s3")
            make_bucket(gcs, "orch-gs")
            yield s3, gcs
        finally:
            s3.stop()
            gcs.stop()


# The run's key, as the controller would derive it (recovery/signing.py).
KEY = controller_keys(bytes(range(32)), "object-stores")


def _s3(servers, prefix: str, **opts) -> CheckpointStore:
    return CheckpointStore(
        f"s3://orch-s3/{prefix}",
        region="s3-region",
        storage_options={"endpoint_url": servers[0].endpoint, **opts},
        key=KEY,
    )


def _gs(servers, prefix: str, **opts) -> CheckpointStore:
    return CheckpointStore(
        f"gs://orch-gs/{prefix}",
        region="gs-region",
        storage_options={"endpoint_url": servers[1].endpoint, "token": "anon", "project": "p", **opts},
        key=KEY,
    )


def _write(store: CheckpointStore, step: int, attempt: int = 1) -> None:
    # Files go into the folder of the generation that commits them (step-N-gG).
    entries = [store.put(RUN, step, n, f"{n}@{step}".encode() * 1000, attempt) for n in ("model.pt", "state.pt")]
    store.commit(RUN, step, attempt, entries)


@pytest.mark.parametrize("make", [_s3, _gs], ids=["s3", "gcs"])
def test_commit_verify_skip_corrupt_and_retain(servers, make):
    store = make(servers, f"conf-{time.time_ns()}")
    for step in (10, 20, 30):
        _write(store, step)
    store.put(RUN, 40, "model.pt", b"torn", 1)  # a write cut off before its manifest
    assert store.committed_steps(RUN) == [10, 20, 30]
    path = f"{store.step_path(RUN, 30)}/model.pt"
    data = bytearray(store.fs.cat_file(path))
    data[5] ^= 0xFF
    store.fs.pipe_file(path, bytes(data))
    skipped: list[tuple[int, str]] = []
    m = store.latest_verified(RUN, on_skip=lambda s, r: skipped.append((s, r)))
    assert m is not None and m.step == 20
    assert skipped and skipped[0][0] == 30 and "sha256" in skipped[0][1]
    store.retain(RUN, keep=2)
    assert store.committed_steps(RUN) == [20, 30]
    assert 40 in store.all_steps(RUN)  # newer than the newest commit: may be in flight


def test_replication_across_store_kinds_verifies_the_copy(servers):
    s3, gs = _s3(servers, f"rep-{time.time_ns()}"), _gs(servers, f"rep-{time.time_ns()}")
    _write(s3, 50)
    r = replicate(s3, gs, s3.manifest(RUN, 50))
    assert r is not None and r.lag_s >= 0
    assert gs.verify(RUN, 50).ok
    assert gs.manifest(RUN, 50).extra["replica_of"] == "s3-region"
    best = sync_newest(RUN, [s3, gs], on_skip=lambda *a: None)
    assert best is not None and best[1].step == 50


def test_a_hung_server_is_a_bounded_store_error(servers):
    s3 = servers[0]
    store = _s3(servers, f"hang-{time.time_ns()}", op_timeout_s=2, config_kwargs={"read_timeout": 2})
    _write(store, 10)
    os.killpg(s3.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError) as err:
            store.committed_steps(RUN)
        assert time.monotonic() - t0 < 10
        assert "s3://orch-s3" in str(err.value)
        t0 = time.monotonic()
        with pytest.raises(StoreError):
            store.put(RUN, 20, "model.pt", b"x" * 1000)
        assert time.monotonic() - t0 < 10
    finally:
        os.killpg(s3.proc.pid, signal.SIGCONT)
    assert store.committed_steps(RUN) == [10]


def test_a_missing_bucket_names_the_store(servers):
    store = CheckpointStore(
        "s3://no-such-bucket-here/x", region="r1", storage_options={"endpoint_url": servers[0].endpoint}
    )
    with pytest.raises(StoreError) as err:
        store.put(RUN, 1, "model.pt", b"x")
    assert "no-such-bucket-here" in str(err.value)


def test_orphaned_multipart_uploads_under_the_run_are_aborted(servers):
    store = _s3(servers, f"mpu-{time.time_ns()}")
    raw = store.fs.unwrapped
    bucket, _, prefix = store.run_root(RUN).partition("/")
    mine = raw.call_s3("create_multipart_upload", Bucket=bucket, Key=f"{prefix}/step-10/model.pt")
    other = raw.call_s3("create_multipart_upload", Bucket=bucket, Key="someone-else/file")
    aborted = store.abort_orphaned_uploads(RUN)
    assert aborted == [f"{prefix}/step-10/model.pt"]
    left = {u["UploadId"] for u in raw.list_multipart_uploads(bucket)}
    assert mine["UploadId"] not in left and other["UploadId"] in left


@pytest.mark.parametrize("make", [_s3, _gs], ids=["s3", "gcs"])
def test_a_large_file_is_read_in_ranges_once_verified_and_a_resized_one_fails_its_size_check(
    servers, make, monkeypatch
):
    from recovery.replication import load_newest

    RANGE_BYTES = 2**20
    monkeypatch.setattr("recovery.fetch.RANGE_BYTES", RANGE_BYTES)
    store = make(servers, f"ranged-{time.time_ns()}")
    big = os.urandom(2 * RANGE_BYTES + 12345)  # three ranges, the last one short
    entries = [store.put(RUN, 10, "model.pt", big, 1), store.put(RUN, 10, "state.pt", b"s" * 100, 1)]
    store.commit(RUN, 10, 1, entries)
    best = load_newest(RUN, [store], on_skip=pytest.fail, keep=lambda name: name == "model.pt")
    assert best is not None and best.manifest.step == 10
    assert best.files == {"model.pt": big}
    assert store.read(best.manifest, "model.pt") == big

    path = f"{store.step_path(RUN, 10)}/model.pt"
    # One byte longer: the ranges alone would read the expected bytes; the last asks past the end.
    flipped = big[:-1] + bytes([big[-1] ^ 1])
    for wrong, reason in ((big + b"x", "has"), (big[: RANGE_BYTES + 7], "has"), (flipped, "sha256")):
        store.fs.pipe_file(path, wrong)
        verdict = store.verify(RUN, 10)
        assert not verdict.ok and reason in verdict.reason and "model.pt" in verdict.reason, verdict
        skipped: list[int] = []
        assert load_newest(RUN, [store], on_skip=lambda s, step, why, into=skipped: into.append(step)) is None
        assert skipped == [10]


def test_a_multipart_copy_is_checked_by_its_etag_without_reading_it_back(servers):
    from recovery.store import _md5_matches, multipart_etag

    store = _s3(servers, f"etag-{time.time_ns()}")
    data = os.urandom(11 * 2**20)
    path = f"{store.root}/part"
    # S3's smallest part is 5 MiB: three parts, the last short, as s3fs cuts a large file.
    store.fs.unwrapped.pipe_file(path, data, chunksize=5 * 2**20)
    info = store.fs.info(path)
    assert str(info["ETag"]).strip('"') == multipart_etag(data, 5 * 2**20)
    # Parts cut another way than s3fs's default cannot be recomputed: read back instead.
    assert _md5_matches(info, data) is None
    single = f"{store.root}/single"
    store.fs.pipe_file(single, data)
    assert _md5_matches(store.fs.info(single), data) is True
    # The last byte flipped (a fixed replacement byte equals the random one once in 256 runs).
    assert _md5_matches(store.fs.info(single), data[:-1] + bytes([data[-1] ^ 1])) is False


@pytest.mark.parametrize("make", [_s3, _gs], ids=["s3", "gcs"])
def test_a_shared_upload_commits_rank_0s_bytes_whatever_the_other_rank_does(servers, make, monkeypatch):
    """Two ranks, each with its own client of the same store: rank 1 puts its share (on
    S3 a file large enough for a multipart upload), rank 0 checks it against its own
    bytes before committing; a rank whose bytes differ puts nothing, and rank 0 puts
    that file itself after its wait. Every commit verifies: the manifest holds the
    sha256 of rank 0's bytes."""
    from orchestrator.runtime.checkpoint import share_plan as ck
    from orchestrator.runtime.checkpoint.background import AsyncCheckpointer
    from orchestrator.runtime.checkpoint.share_upload import ShareUpload

    monkeypatch.setattr(ck, "SHARE_WAIT_MIN_S", 0.5)
    prefix = f"shared-{time.time_ns()}"
    rank0, rank1 = make(servers, prefix), make(servers, prefix)
    big = 101 * 2**20 if make is _s3 else 2**20  # S3: a multipart upload (s3fs's parts are 50 MB)
    cases = (
        (10, {"model.pt": os.urandom(big), "state.pt": b"state", "rng-rank0.pt": b"r"}, False),
        (20, {"model.pt": os.urandom(2**20), "state.pt": b"state", "rng-rank0.pt": b"r"}, True),
    )
    for step, files, diverged in cases:
        shares = {"model.pt": 1, "state.pt": 1}
        digests = ck.sha256_all(files, shares)
        share = ShareUpload(rank1, RUN, 1)
        share.submit(step, {n: (b"x" + files[n] if diverged else files[n]) for n in shares}, digests)
        # Rank 1's share lands first: what rank 0 then finds decides, not a race with its
        # wait (a share later than the wait is taken over, like a missing one: a unit test's).
        assert share.wait(60)
        ckpt = AsyncCheckpointer([rank0], RUN, 1, keep_last=3)
        ckpt.submit(step, files, {}, shares=shares, digests=digests)
        ckpt.wait(timeout_s=120)
        assert set(share.last.values()) == {"other_bytes" if diverged else "put"}
        assert ckpt.last_share is not None
        assert ckpt.last_share.taken == (sorted(shares) if diverged else [])
        m = rank0.manifest(RUN, step)
        assert m is not None and {f.name: f.sha256 for f in m.files} == ck.sha256_all(files, files)
        assert rank0.verify(RUN, step).ok


@pytest.mark.parametrize("make", [_s3, _gs], ids=["s3", "gcs"])
def test_a_sharded_rank_file_is_committed_by_its_size_and_a_copy_received_otherwise_is_withdrawn(servers, make):
    """A rank's own file (a shard): put under the digest it took, confirmed by the store's
    MD5 (on S3 past s3fs's multipart size, by its multipart ETag), and committed by rank 0,
    which reads none of it back; a copy whose MD5 is not the rank's bytes' is removed, and
    rank 0 then does not commit at all."""
    from concurrent.futures import ThreadPoolExecutor

    from orchestrator.runtime.checkpoint.background import AsyncCheckpointer
    from orchestrator.runtime.checkpoint.rank0_upload import Rank0Upload
    from orchestrator.runtime.checkpoint.share_upload import ShareUpload
    from orchestrator.runtime.checkpoint.snapshot import snapshot_of

    prefix = f"sharded-{time.time_ns()}"
    rank0, rank1 = make(servers, prefix), make(servers, prefix)
    # Handed over as the loop hands it: a file spilled to the node's disk, mapped
    # (checkpoint/spill.py); sent in slices past s3fs's multipart size, whole below it.
    with tempfile.TemporaryFile() as f:
        f.write(os.urandom(101 * 2**20 if make is _s3 else 2**20))
        f.flush()
        shard = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    sha = sha256_hex(shard)
    share = ShareUpload(rank1, RUN, 1)
    share.submit(10, {"shard-r1.pt": shard}, {"shard-r1.pt": sha}, own=True)
    assert share.wait(120) and share.last == {"shard-r1.pt": "put"}
    ckpt = AsyncCheckpointer([rank0], RUN, 1, keep_last=3)
    ckpt.submit(10, {"index.json": b"{}"}, {}, remote={"shard-r1.pt": (1, len(shard), sha)})
    ckpt.wait(timeout_s=120)
    assert rank0.verify(RUN, 10).ok and rank0.read(rank0.manifest(RUN, 10), "shard-r1.pt") == shard[:]

    # Had the store received other bytes than the rank's, its MD5 says so: the copy goes,
    # and rank 0, finding no such file, would not commit.
    assert rank1.confirm_put(RUN, 10, "shard-r1.pt", shard, 1)
    assert not rank1.confirm_put(RUN, 10, "shard-r1.pt", bytes(len(shard)), 1)
    assert not rank1.landed(RUN, 10, "shard-r1.pt", len(shard), 1)
    snap = snapshot_of(10, {"index.json": b"{}"}, {}, remote={"shard-r1.pt": (1, len(shard), sha)})
    with ThreadPoolExecutor(2) as pool, pytest.raises(StoreError, match=r"shard-r1\.pt of step 10 is not in"):
        Rank0Upload(RUN, pool)(rank0, snap, False)
