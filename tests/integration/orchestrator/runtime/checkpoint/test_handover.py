"""Rank 0's verified files handed to the group over a real gloo process group of forked
ranks on 127.0.0.1: every rank ends with rank 0's exact bytes, a file larger than a
chunk, one of a single chunk and an empty one alike."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from orchestrator.runtime.checkpoint import handover
from tests.support.runs import run_forked_ranks

pytestmark = pytest.mark.integration


def _files() -> dict[str, bytes]:
    gen = torch.Generator().manual_seed(7)
    big = torch.randint(0, 256, (1000,), generator=gen, dtype=torch.uint8).numpy().tobytes()
    return {"model.pt": big, "state.pt": b"x" * 10, "empty.pt": b""}


def _rank_main(root: str, tag: str, rank: int, world: int, announce: dict[str, int]) -> None:
    import torch.distributed as dist

    handover.CHUNK_BYTES = 64  # many chunks, the last a short one
    dist.init_process_group("gloo", init_method=f"file://{root}/pg-{tag}", rank=rank, world_size=world)
    try:
        mine = _files() if rank == 0 else {}
        got = handover.handed_over(rank, mine, announce, torch.device("cpu"))
        out = {name: hashlib.sha256(data).hexdigest() for name, data in got.items()}
        Path(root, f"{tag}-rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


def test_every_rank_ends_with_rank_0s_bytes(tmp_path: Path) -> None:
    world = 3
    sizes = {name: len(data) for name, data in _files().items()}
    args = [(str(tmp_path), "ok", r, world, sizes) for r in range(world)]
    assert run_forked_ranks(_rank_main, args, 120) == [0] * world
    want = {name: hashlib.sha256(data).hexdigest() for name, data in _files().items()}
    for r in range(world):
        assert json.loads((tmp_path / f"ok-rank{r}.json").read_text()) == want
