"""FSDP's shard units and options, without a process group."""

from __future__ import annotations

import pytest
import torch

from orchestrator.runtime.loop.fsdp import checkpoint_activations, default_units, mixed_precision
from orchestrator.wire.sections import FsdpSection
from tests.support.nets import Net

pytestmark = pytest.mark.unit


def test_activation_checkpointing_keeps_the_names_and_the_gradients() -> None:
    torch.manual_seed(0)
    plain, wrapped = Net(), Net()
    wrapped.load_state_dict(plain.state_dict())
    checkpoint_activations(default_units(wrapped))
    assert list(wrapped.state_dict()) == list(plain.state_dict())
    x = torch.randn(3, 4)
    plain(x).sum().backward()
    wrapped(x).sum().backward()
    for a, b in zip(plain.parameters(), wrapped.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_no_dtype_given_is_no_mixed_precision_policy() -> None:
    assert mixed_precision(FsdpSection()) is None
    policy = mixed_precision(FsdpSection(param_dtype="bf16", reduce_dtype="fp32"))
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert mixed_precision(FsdpSection(param_dtype="bf16")).reduce_dtype is None
