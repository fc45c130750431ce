"""weights_sha256(): the fingerprint result.json reports, computed exactly as documented."""

from __future__ import annotations

import hashlib

import torch

from orchestrator.runtime.loop.weights import weights_sha256


def state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "z.bias": torch.randn(3, generator=g),
        "a.weight": torch.randn(4, 5, generator=g).t(),  # not contiguous
        "mitte.größe": torch.arange(6, dtype=torch.int64),
    }


def by_hand(sd: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for key in sorted(sd):
        h.update(key.encode("utf-8"))
        h.update(sd[key].numpy().tobytes())  # numpy writes C order, whatever the strides
    return h.hexdigest()


def test_sha256_is_over_sorted_utf8_names_then_tensor_bytes() -> None:
    sd = state_dict()
    assert weights_sha256(sd) == by_hand(sd)
    assert weights_sha256(dict(reversed(sd.items()))) == by_hand(sd)


def test_sha256_changes_when_one_weight_moves_by_one_ulp() -> None:
    sd = state_dict()
    before = weights_sha256(sd)
    w = sd["z.bias"].clone()
    w[1] = torch.nextafter(w[1], torch.tensor(float("inf")))
    assert w[1] != sd["z.bias"][1]
    assert weights_sha256({**sd, "z.bias": w}) != before
