"""FSDP's shard units and options, without a process group."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from orchestrator.runtime.sharding import (
    ShardUnitError,
    checkpoint_activations,
    default_units,
    mixed_precision,
    shard_units,
)
from orchestrator.wire.sections import FsdpSection

pytestmark = pytest.mark.unit


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.small = nn.ModuleList([nn.Linear(4, 4)])
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4), nn.ReLU()])
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in [*self.small, *self.blocks]:
            x = m(x)
        return self.head(x)


class Named:
    def __init__(self, pick) -> None:
        self.shard_units = pick


def test_the_default_units_are_the_blocks_of_the_largest_module_list() -> None:
    net = Net()
    assert default_units(net) == list(net.blocks)
    assert default_units(nn.Sequential(nn.Linear(2, 2))) == []  # no list: the root alone


def test_a_workloads_own_units_are_taken_when_they_are_the_models() -> None:
    net = Net()
    assert shard_units(Named(lambda m: [m.head]), net) == [net.head]
    assert shard_units(object(), net) == list(net.blocks)


@pytest.mark.parametrize(
    ("pick", "says"),
    [
        (lambda m: [nn.Linear(4, 4)], r"shard_units\(model\)\[0\] \(Linear\) is not a submodule of the model"),
        (lambda m: [m], r"\[0\] \(Net\) is not a submodule"),
        (lambda m: [m.head, m.head], r"\[1\] \(Linear\) is named twice"),
        (lambda m: ["head"], r"\[0\] is a str; expected an nn.Module"),
    ],
)
def test_units_that_are_not_the_models_own_are_refused_by_index(pick, says: str) -> None:
    with pytest.raises(ShardUnitError, match=says):
        shard_units(Named(pick), Net())


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
