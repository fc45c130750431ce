"""The fingerprint of a model's weights that result.json reports."""

from __future__ import annotations

import hashlib

import torch


def weights_sha256(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over keys sorted; each key's UTF-8 name, then its tensor's contiguous CPU bytes."""
    h = hashlib.sha256()
    for key in sorted(state_dict):
        t = state_dict[key].detach().cpu().contiguous()
        h.update(key.encode("utf-8"))
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
