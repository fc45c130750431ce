"""trainer.strategy=fsdp: FSDP2 sharding of a workload's model, in place.

The model is sharded (``fully_shard`` of each shard unit, then the root) before its
optimizer is made, so the optimizer holds the sharded parameters. The workload protocol
is unchanged: a workload may name its units with an optional ``shard_units(model)``;
without it, every block of the model's largest ``nn.ModuleList`` is a unit. How a
sharded model's state is checkpointed is ``checkpoint.sharding``'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from orchestrator.wire.sections import FsdpSection
from orchestrator.workloads.units import ShardUnitError, default_units, shard_units  # noqa: F401  (re-exported)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def checkpoint_activations(units: list[nn.Module]) -> None:
    """trainer.activation_checkpointing=units: each unit's forward recomputed in the backward
    pass. The forward is wrapped in place (no wrapper module), so parameter names, and the
    checkpoints and weights_sha256 that use them, stay the same."""
    from torch.utils.checkpoint import checkpoint

    for unit in units:
        inner = unit.forward

        @functools.wraps(inner)
        def forward(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            return checkpoint(_inner, *args, use_reentrant=False, **kwargs)

        unit.forward = forward  # type: ignore[method-assign]


def mixed_precision(fsdp: FsdpSection) -> Any:
    """trainer.fsdp's param_dtype / reduce_dtype as FSDP2's policy (None: none given)."""
    if fsdp.param_dtype == "none" and fsdp.reduce_dtype == "none":
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=DTYPES.get(fsdp.param_dtype), reduce_dtype=DTYPES.get(fsdp.reduce_dtype))


def shard(
    model: nn.Module,
    units: list[nn.Module],
    fsdp: FsdpSection,
    device: torch.device,
    world: int,
    group_formed: Callable[[], None] | None = None,
) -> None:
    """fully_shard each unit, then the root, over all ``world`` ranks of the default group.
    ``group_formed``: waits until that group, formed in the background while the model was
    built, exists (a mesh made before it would start a group of its own from the
    environment, which names no rendezvous where the driver hosts one)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if group_formed is not None:
        group_formed()
    mesh = init_device_mesh(device.type, (world,))
    options: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": fsdp.reshard_after_forward}
    policy = mixed_precision(fsdp)
    if policy is not None:
        options["mp_policy"] = policy
    for unit in units:
        fully_shard(unit, **options)
    fully_shard(model, **options)
