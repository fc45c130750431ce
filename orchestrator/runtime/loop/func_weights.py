"""``weights_sha256`` of a train function's checkpoint: the model's tensors, whatever the layout.

A function saves its model its own way: ``torch.save`` of a dict from rank 0, a
``torch.distributed.checkpoint`` (DCP) folder sharded across ranks, several files. The
digest reads every torch file (``.pt``, ``.pth``, ``.bin``, ``.ckpt``, loaded with
``weights_only``) and every DCP folder (one holding ``.metadata``, loaded whole with no
process group) of the checkpoint's folder, flattens them into dotted names
(``{"model": {"fc.weight": t}}`` is ``model.fc.weight``), and keeps the model:

- the tensors under the first name part that names a model (``model``, ``model_state``,
  ``model_state_dict``, or Lightning's ``state_dict``: ``model.fc.weight``,
  ``app.model.0.weight`` as a DCP ``AppState`` saves it), with that prefix dropped;
  where no name has such a part (a bare ``model.state_dict()`` saved), every tensor;
- a wrapper's part dropped: ``module.`` (DDP), ``_orig_mod.`` (torch.compile),
  ``_fsdp_wrapped_module.`` and ``_checkpoint_wrapped_module.``;

then hashes them exactly as the built-in loop hashes its model (``weights.weights_sha256``:
keys sorted, each key's name then its tensor's bytes). So the same weights give the same
digest saved whole by one rank or sharded by four, and an optimizer's state, an epoch
counter or a file's timestamp never move it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from orchestrator.runtime.loop.func_exact import RNG_DIR
from orchestrator.runtime.loop.weights import weights_sha256

TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
WRAPPERS = frozenset({"module", "_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"})
MODEL_PARTS = frozenset({"model", "model_state", "model_state_dict", "state_dict"})


def flatten(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in nested dicts, lists and tuples, by dotted name."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from flatten(value, f"{prefix}.{i}" if prefix else str(i))


def model_part(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's tensors by their names in the model (see the module's docstring)."""
    under: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        parts = name.split(".")
        at = next((i for i, p in enumerate(parts) if p in MODEL_PARTS), None)
        if at is not None:
            rest = parts[at + 1 :]
            if rest:
                under[".".join(rest)] = tensor
    chosen = under or tensors
    return {".".join(p for p in name.split(".") if p not in WRAPPERS): t for name, t in chosen.items()}


def _dcp_state(folder: Path) -> dict[str, Any]:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    _load_state_dict(
        state, storage_reader=FileSystemReader(str(folder)), planner=_EmptyStateDictLoadPlanner(), no_dist=True
    )
    return state


def folder_tensors(root: str) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint folder's torch files and DCP folders, by dotted name;
    a name two sources share is told apart by its file's path."""
    base = Path(root)
    sources: list[tuple[str, Any]] = []
    dcp = sorted({p.parent for p in base.rglob(".metadata") if RNG_DIR not in p.relative_to(base).parts})
    for folder in dcp:
        sources.append((folder.relative_to(base).as_posix(), _dcp_state(folder)))
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(base)
        if not path.is_file() or path.suffix not in TORCH_SUFFIXES or rel.parts[0] == RNG_DIR:
            continue
        if any(folder in path.parents for folder in dcp):
            continue  # a DCP folder's own files
        try:
            obj = torch.load(path, weights_only=True, map_location="cpu")
        except Exception:
            continue  # not a torch file (a tokenizer's .bin): no weights of the model
        sources.append((rel.as_posix(), obj))
    out: dict[str, torch.Tensor] = {}
    clashes = set()
    for _, obj in sources:
        for name, tensor in flatten(obj):
            if name in out:
                clashes.add(name)
            out.setdefault(name, tensor)
    if clashes:
        out = {}
        for where, obj in sources:
            for name, tensor in flatten(obj):
                out[f"{where}:{name}" if name in clashes else name] = tensor
    return out


def folder_weights_sha256(root: str) -> str | None:
    """The digest of the model in a checkpoint folder; None when it holds no tensor."""
    model = model_part(folder_tensors(root))
    return weights_sha256(model) if model else None
