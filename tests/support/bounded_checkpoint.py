"""A sharded checkpoint committed and restored by one process, rank after rank, as the
training loop's ranks write and read theirs: each rank's shards serialised (``spill``,
the loop's way, or ``bytes``, the way it had before: ``torch.save`` into memory), put
into a ``file://`` store with their digest, one signed manifest, then each rank's file
read back (``read_shards``: streamed to disk, verified, mapped) and copied into a fresh
state. Run under a memory bound by tests/integration/orchestrator/runtime/checkpoint/
test_spill.py; prints one JSON line: each rank's state digest, before and after.

    python -m tests.support.bounded_checkpoint STORE_URL SCRATCH RANKS SHARD_MIB spill|bytes|baseline
"""

from __future__ import annotations

import hashlib
import io
import json
import sys

import torch

from orchestrator.runtime.checkpoint.restore_clock import RestoreClock
from orchestrator.runtime.checkpoint.shard_index import shard_file
from orchestrator.runtime.checkpoint.shard_restore import read_shards
from orchestrator.runtime.checkpoint.spill import spill
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY

RUN, STEP = "bounded", 10


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(memoryview(t.numpy()).cast("B")).hexdigest()


def shard_of(rank: int, mib: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    return {"model/w": torch.randn(mib * 2**20 // 4, generator=g)}


def main(url: str, scratch: str, ranks: int, mib: int, how: str) -> None:
    if how == "baseline":
        # What the process needs to hold one rank's state at all (its imports, one shard).
        print(json.dumps({"before": [digest(shard_of(0, mib)["model/w"])]}))
        return
    store = CheckpointStore(url, key=TEST_KEY)
    before, entries = [], []
    for rank in range(ranks):
        tensors = shard_of(rank, mib)
        before.append(digest(tensors["model/w"]))
        if how == "spill":
            spilled = spill(tensors, scratch)
            del tensors
            entries.append(store.put(RUN, STEP, shard_file(rank), spilled.data, 1, spilled.sha256))  # type: ignore[arg-type]
            spilled.data.close()
        else:
            buf = io.BytesIO()
            torch.save(tensors, buf)
            del tensors
            entries.append(store.put(RUN, STEP, shard_file(rank), buf.getvalue(), 1))
            del buf
    manifest = store.commit(RUN, STEP, 1, entries)
    after = []
    for rank in range(ranks):
        shards = read_shards(store, manifest, [shard_file(rank)], RestoreClock(), scratch)
        state = torch.empty_like(shards.loaded[rank]["model/w"])
        state.copy_(shards.loaded[rank]["model/w"])
        shards.close()
        after.append(digest(state))
        del state
    print(json.dumps({"before": before, "after": after, "bytes": sum(e.size for e in entries)}))


if __name__ == "__main__":
    url, scratch, ranks, mib, how = sys.argv[1:6]
    main(url, scratch, int(ranks), int(mib), how)
