"""The fingerprint of a model's weights that result.json reports, and what its state weighs on a rank."""

from __future__ import annotations

import hashlib
from typing import Any

import torch


def weights_sha256(state_dict: dict[str, Any]) -> str:
    """sha256 over keys sorted; each key's UTF-8 name, then its tensor's contiguous CPU bytes.

    A sharded model's state (DTensors, trainer.strategy=fsdp) hashes to the same digest
    as the same weights whole: each parameter is gathered alone (full_tensor, a
    collective: every rank calls this, in the same key order), never the whole model."""
    h = hashlib.sha256()
    for key in sorted(state_dict):
        value = state_dict[key].detach()
        if hasattr(value, "full_tensor"):
            value = value.full_tensor()
        t = value.cpu().contiguous()
        h.update(key.encode("utf-8"))
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def local_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """The bytes of parameters and optimizer state this rank holds: a sharded tensor
    (a DTensor under trainer.strategy=fsdp) counts its local shard alone."""
    tensors = [*model.parameters(), *(v for state in optimizer.state.values() for v in state.values())]
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            local = t.to_local() if hasattr(t, "to_local") else t
            total += local.numel() * local.element_size()
    return total
