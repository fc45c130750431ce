"""A rank's share of a checkpoint, put by the rank itself: never past a fence this run's controller signed."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.runtime.checkpoint.share_upload import ShareUpload
from recovery.fencing import Lineage
from recovery.keys import controller_keys
from recovery.store import CheckpointStore, sha256_hex
from tests.unit.orchestrator.runtime.checkpoint.test_background import _plan, _share_of, _stores

pytestmark = pytest.mark.unit
RUN = "ckpt-run"
FILES = {"model.pt": b"m" * 300, "optimizer.pt": b"o" * 600, "state.pt": b"s" * 10, "rng-rank0.pt": b"r" * 20}


def test_a_fenced_rank_puts_nothing(tmp_path: Path) -> None:
    rank0, rank1 = _stores(tmp_path)
    rank0.write_fence(RUN, Lineage().then(1, 0).then(2, 10))
    files = dict(FILES)
    shares, digests = _plan(files, 2)
    share = ShareUpload(rank1, RUN, 1)  # attempt 1: a zombie now
    share.submit(20, _share_of(files, shares, 1), digests)
    share.wait(20)
    assert set(share.last.values()) == {"fenced"} and share.fenced
    assert rank0.all_steps(RUN) == {}
    share.submit(40, _share_of(files, shares, 1), digests)  # and stays quiet
    assert share.wait(20) and rank0.all_steps(RUN) == {}


def test_a_fence_this_run_s_controller_did_not_sign_stops_no_share(tmp_path: Path) -> None:
    _, rank1 = _stores(tmp_path)
    forger = CheckpointStore(rank1.url, region=rank1.region, key=controller_keys(b"f" * 32, RUN))
    forger.write_fence(RUN, Lineage().then(1, 0).then(9, 10))  # a generation far above: forged
    files = dict(FILES)
    shares, digests = _plan(files, 2)
    share = ShareUpload(rank1, RUN, 2)
    share.submit(20, _share_of(files, shares, 1), digests)
    share.wait(20)
    assert set(share.last.values()) == {"put"} and not share.fenced


# --- a rank's own files (a sharded checkpoint's shard): hashed once, withdrawn if the store got other bytes ---


def test_own_files_are_put_under_the_digest_taken_of_them_without_hashing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.runtime.checkpoint.share_upload as share_module
    import recovery.store as store_module

    hashed: list[int] = []
    monkeypatch.setattr(share_module, "sha256_hex", lambda data: hashed.append(len(data)) or "")
    monkeypatch.setattr(store_module, "sha256_hex", lambda data: hashed.append(len(data)) or "")
    _, rank1 = _stores(tmp_path)
    shard = b"rank 1's rows" * 50
    share = ShareUpload(rank1, RUN, 1)
    share.submit(20, {"shard-r1.pt": shard}, {"shard-r1.pt": "d" * 64}, own=True)
    share.wait(20)
    assert share.last == {"shard-r1.pt": "put"} and hashed == []
    assert rank1.landed(RUN, 20, "shard-r1.pt", len(shard), 1)


def test_an_own_file_the_store_received_otherwise_is_withdrawn(tmp_path: Path, memory_url: str) -> None:
    class OtherBytesArrive(CheckpointStore):
        """An object store whose MD5 of what it received is another file's."""

        def confirm_put(self, run_id: str, step: int, name: str, data: bytes, generation: int | None = None) -> bool:
            self.fs.info = lambda path: {"size": len(data), "ETag": '"' + "0" * 32 + '"'}  # type: ignore[method-assign]
            try:
                return super().confirm_put(run_id, step, name, data, generation)
            finally:
                del self.fs.info

    rank1 = OtherBytesArrive(memory_url, region="a", key=_stores(tmp_path)[1].key)
    shard = b"rank 1's rows" * 50
    share = ShareUpload(rank1, RUN, 1)
    share.submit(20, {"shard-r1.pt": shard}, {"shard-r1.pt": "d" * 64}, own=True)
    share.wait(20)
    assert share.last == {"shard-r1.pt": "withdrawn"}
    assert not rank1.landed(RUN, 20, "shard-r1.pt", len(shard), 1)  # rank 0 will not commit it


def test_a_shard_of_its_size_with_other_bytes_is_committed_under_its_ranks_digest_and_never_restored(
    tmp_path: Path,
) -> None:
    """Rank 0 no longer reads another rank's shard back before it signs: it lists the
    digest that rank took of its bytes. A file of that size with other bytes (a stray
    writer after the put) is committed so, and the restore's check refuses it."""
    from orchestrator.runtime.checkpoint.background import AsyncCheckpointer

    rank0, rank1 = _stores(tmp_path)
    shard = b"rank 1's rows" * 50
    rank1.put(RUN, 20, "shard-r1.pt", b"X" * len(shard), 1)
    ckpt = AsyncCheckpointer([rank0], RUN, 1, keep_last=2)
    ckpt.submit(20, {"index.json": b"{}"}, {}, remote={"shard-r1.pt": (1, len(shard), sha256_hex(shard))})
    ckpt.wait(timeout_s=20)
    assert rank0.committed_steps(RUN) == [20]
    skipped: list[tuple[int, str]] = []
    assert rank0.latest_verified(RUN, on_skip=lambda step, why: skipped.append((step, why))) is None
    assert skipped and skipped[0][0] == 20 and "shard-r1.pt" in skipped[0][1], skipped
