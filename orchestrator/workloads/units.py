"""A workload's shard units: what trainer.strategy=fsdp shards one by one (then the root).

A workload may name them with an optional ``shard_units(model) -> list[nn.Module]``;
without it, every block of the model's largest ``nn.ModuleList`` is a unit. The
controller checks a workload's own list before launch (on a model built on the meta
device, so no memory), the workers again on the model they train.
"""

from __future__ import annotations

from typing import Any

from torch import nn


class ShardUnitError(ValueError):
    """The workload's shard_units(model) named something FSDP cannot shard."""


def default_units(model: nn.Module) -> list[nn.Module]:
    """Every block of the model's largest nn.ModuleList (the first of the largest); none: no units."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    if not lists:
        return []
    largest = max(lists, key=len)
    return list(largest)


def shard_units(workload: Any, model: nn.Module) -> list[nn.Module]:
    """The workload's shard_units(model) when it has one, checked: each unit a submodule of
    the model (not the model itself, which is sharded last anyway), none twice."""
    named = getattr(workload, "shard_units", None)
    if not callable(named):
        return default_units(model)
    units = list(named(model))
    inside = {id(m) for m in model.modules() if m is not model}
    seen: set[int] = set()
    for i, unit in enumerate(units):
        if not isinstance(unit, nn.Module):
            raise ShardUnitError(f"shard_units(model)[{i}] is a {type(unit).__name__}; expected an nn.Module")
        if id(unit) not in inside:
            raise ShardUnitError(
                f"shard_units(model)[{i}] ({type(unit).__name__}) is not a submodule of the model; "
                "return modules of the model it was given"
            )
        if id(unit) in seen:
            raise ShardUnitError(f"shard_units(model)[{i}] ({type(unit).__name__}) is named twice")
        seen.add(id(unit))
    return units


def check_units_before_launch(workload: Any) -> None:
    """The workload's own shard_units(model), checked on its model built on the meta device
    (no weights allocated): ShardUnitError names the first unit that is not the model's."""
    import torch

    if not callable(getattr(workload, "shard_units", None)):
        return
    with torch.device("meta"):
        model = workload.model()
    shard_units(workload, model)
