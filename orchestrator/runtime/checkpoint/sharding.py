"""trainer.strategy=fsdp: a sharded model's state, as each rank's shards or as one whole.

A checkpoint of a sharded model (``loop.fsdp``) is sharded too (``save_shards`` /
``load_shards``, the layout in ``shard_index``): each rank's own rows of every sharded
tensor, loaded at any world size by copying the rows each rank now holds from the saved
ranks' files that hold them. ``FullModel`` / ``FullOptimizer`` (the whole state, gathered
on rank 0 one parameter at a time) read the checkpoints of fsdp runs written before that.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _full_options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)


class FullModel:
    """A sharded model's state as one whole (every rank calls both methods: they are
    collectives). state_dict: the full state on rank 0, {} elsewhere; load_state_dict:
    every rank gives the full state and keeps its own shards of it."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(self.model, options=_full_options())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(self.model, state, options=StateDictOptions(full_state_dict=True))


class FullOptimizer:
    """The optimizer's state of a sharded model as one whole, keyed by parameter name."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(self.model, self.optimizer, options=_full_options())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(self.model, self.optimizer, state, options=StateDictOptions(full_state_dict=True))


# --- sharded checkpoints (see shard_index.py for the layout) ---------------------------


def _sharded_options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=False)


def _walk(tree: Any, path: tuple[str, ...] = ()) -> Any:
    """(path, leaf) of every leaf of nested dicts and lists."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _walk(v, (*path, str(k)))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _walk(v, (*path, str(i)))
    else:
        yield path, tree


def _strip(tree: Any) -> Any:
    """The tree with its DTensor leaves as None: the part of the state every rank holds alike."""
    from torch.distributed.tensor import DTensor

    if isinstance(tree, dict):
        return {k: _strip(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_strip(v) for v in tree]
    return None if isinstance(tree, DTensor) else tree


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def sharded_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The model's and optimizer's sharded state dicts (DTensor leaves), as one tree."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    return {
        "model": get_model_state_dict(model, options=_sharded_options()),
        "optimizer": get_optimizer_state_dict(model, optimizer, options=_sharded_options()),
    }


def save_shards(
    model: nn.Module, optimizer: torch.optim.Optimizer, rank: int, world: int
) -> tuple[dict[str, torch.Tensor], dict[str, tuple[list[int], str, tuple[int, int]]], dict[str, Any] | None]:
    """This rank's shards (copied to the CPU: the only step the loop waits for besides
    serialising), what it says of them for the index, and on rank 0 the rest of the state
    (every non-sharded leaf: optimizer steps, param groups)."""
    from torch.distributed.tensor import DTensor, Shard

    from orchestrator.runtime.checkpoint.shard_index import chunk_rows

    state = sharded_state(model, optimizer)
    tensors: dict[str, torch.Tensor] = {}
    described: dict[str, tuple[list[int], str, tuple[int, int]]] = {}
    for path, leaf in _walk(state):
        if not isinstance(leaf, DTensor):
            continue
        key = "/".join(path)
        if tuple(leaf.placements) != (Shard(0),):
            raise ValueError(f"{key}: placements {leaf.placements}, expected Shard(0) (FSDP2)")
        start, end = chunk_rows(leaf.shape[0], world, rank)
        local = leaf.to_local()
        if local.shape[0] != end - start:
            raise ValueError(f"{key}: rank {rank} holds {local.shape[0]} rows, expected {end - start}")
        # A copy of its own: torch.save would otherwise write the whole padded storage.
        tensors[key] = local.detach().to("cpu", copy=True).contiguous()
        described[key] = (list(leaf.shape), _dtype_name(leaf.dtype), (start, end))
    return tensors, described, _strip(state) if rank == 0 else None


def load_shards(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    index: Any,
    rank: int,
    world: int,
    rank_file: Any,
    rest: dict[str, Any],
) -> None:
    """Load this rank's shards: each sharded tensor's rows copied from the saved ranks'
    files that hold them (``rank_file(saved_rank)``: that file's verified tensors), the
    rest from ``rest``. A collective (the optimizer's state is made on every rank)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict
    from torch.distributed.tensor import DTensor

    from orchestrator.runtime.checkpoint.shard_index import chunk_rows, overlapping

    target = sharded_state(model, optimizer)
    seen: set[str] = set()

    def fill(tree: Any, saved: Any, path: tuple[str, ...]) -> Any:
        if isinstance(tree, dict):
            if not isinstance(saved, dict):
                raise ValueError(f"{'/'.join(path) or 'state'}: not in the checkpoint")
            return {
                k: fill(v, saved.get(k) if k in saved else saved.get(str(k)), (*path, str(k))) for k, v in tree.items()
            }
        if isinstance(tree, list):
            if not isinstance(saved, list) or len(saved) != len(tree):
                raise ValueError(f"{'/'.join(path)}: another length in the checkpoint")
            return [fill(v, s, (*path, str(i))) for i, (v, s) in enumerate(zip(tree, saved, strict=True))]
        if not isinstance(tree, DTensor):
            return saved  # the rest: what rank 0 saved for every rank
        key = "/".join(path)
        entry = index.tensors.get(key)
        if entry is None or tuple(entry.shape) != tuple(tree.shape) or entry.dtype != _dtype_name(tree.dtype):
            raise ValueError(f"{key}: not in the checkpoint with shape {list(tree.shape)}")
        seen.add(key)
        start, end = chunk_rows(tree.shape[0], world, rank)
        local = tree.to_local()
        if local.shape[0] != end - start:
            raise ValueError(f"{key}: rank {rank} holds {local.shape[0]} rows, expected {end - start}")
        with torch.no_grad():
            for r, lo, hi in overlapping(entry, start, end):
                part = rank_file(r).get(key)
                a, b = entry.rows[r]
                if (
                    not isinstance(part, torch.Tensor)
                    or tuple(part.shape) != (b - a, *tree.shape[1:])
                    or part.dtype != tree.dtype
                ):
                    raise ValueError(f"{key}: rank {r}'s file does not hold rows {a}..{b} as {entry.dtype}")
                local[lo - start : hi - start].copy_(part[lo - a : hi - a])
        return tree

    filled = fill(target, rest, ())
    if seen != set(index.tensors):
        raise ValueError(f"the checkpoint holds tensors this model has not: {sorted(set(index.tensors) - seen)[:3]}")
    set_model_state_dict(model, filled["model"], options=_sharded_options())
    set_optimizer_state_dict(model, optimizer, filled["optimizer"], options=_sharded_options())
