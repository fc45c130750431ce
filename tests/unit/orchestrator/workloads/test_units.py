"""A workload's shard units: the default, its own list checked, and the check before launch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from orchestrator.workloads.units import ShardUnitError, check_units_before_launch, default_units, shard_units
from tests.support.nets import Net

pytestmark = pytest.mark.unit


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


class Workload:
    def __init__(self, pick) -> None:
        self.pick = pick

    def model(self) -> nn.Module:
        return Net()

    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        return self.pick(model)


def test_before_launch_the_units_are_checked_on_a_model_without_weights() -> None:
    check_units_before_launch(Workload(lambda m: list(m.blocks)))
    check_units_before_launch(object())  # no shard_units: the default, nothing to check
    with pytest.raises(ShardUnitError, match="not a submodule"):
        check_units_before_launch(Workload(lambda m: [nn.Linear(2, 2, device=torch.device("meta"))]))
