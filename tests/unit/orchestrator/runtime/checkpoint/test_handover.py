"""Rank 0's verified files handed to the group (orchestrator/runtime/checkpoint/handover.py):
two ranks in threads over a broadcast that passes rank 0's tensor to the other rank, so
the chunking is checked without a process group (tests/integration has real gloo ranks)."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest
import torch

from orchestrator.runtime.checkpoint import handover

pytestmark = pytest.mark.unit


def _two_ranks(monkeypatch: pytest.MonkeyPatch, files: dict[str, bytes]) -> tuple[dict[str, bytes], list[int]]:
    """Rank 1's files after the hand-over, and the sizes of the chunks that went."""
    passed: queue.Queue[torch.Tensor] = queue.Queue()
    sent: list[int] = []

    def broadcast(tensor: torch.Tensor, src: int) -> None:
        assert src == 0
        if threading.current_thread().name == "rank0":
            sent.append(tensor.numel())
            passed.put(tensor.clone())
        else:
            tensor.copy_(passed.get(timeout=10))

    monkeypatch.setattr(torch.distributed, "broadcast", broadcast)
    sizes = {name: len(data) for name, data in files.items()}
    got: dict[int, Any] = {}

    def rank(r: int) -> None:
        got[r] = handover.handed_over(r, files if r == 0 else {}, sizes, torch.device("cpu"))

    threads = [threading.Thread(target=rank, args=(r,), name=f"rank{r}") for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert got[0] == files  # rank 0 keeps its own
    return got[1], sent


def test_files_go_in_chunks_and_arrive_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handover, "CHUNK_BYTES", 64)
    files = {"model.pt": bytes(range(256)) * 4 + b"tail", "state.pt": b"s" * 64, "empty.pt": b""}
    got, sent = _two_ranks(monkeypatch, files)
    assert got == files and all(isinstance(v, bytes) for v in got.values())
    # 1028 bytes in 64-byte chunks (the last 4), one whole chunk, nothing for the empty file.
    assert sent == [64] * 16 + [4] + [64]
