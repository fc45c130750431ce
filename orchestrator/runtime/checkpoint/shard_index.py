"""The index of a sharded checkpoint (``shards.json``) and which rank files a rank reads (pure).

Under trainer.strategy=fsdp every rank writes one file of its own shards,
``shard-r<rank>.pt`` (``torch.save`` of plain tensors, read back with
``weights_only=True``), and rank 0 writes ``shards.json``: for each sharded tensor
(keyed by its path in the model's or the optimizer's state dict) its global shape,
dtype and the rows ``[start, end)`` of dimension 0 each rank's file holds (FSDP2 shards
dim 0 as ``torch.chunk`` does). The index is JSON, read from a store: it is bounded and
checked here before anything uses it, and nothing of a checkpoint is ever unpickled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

INDEX_NAME = "shards.json"
REST_NAME = "sharded-rest.pt"
FORMAT = 1
MAX_INDEX_BYTES = 64 * 1024 * 1024
MAX_WORLD = 65536
MAX_DIMS = 8
DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")


class ShardIndexError(ValueError):
    """An index that is not one this code wrote (one line, naming what is wrong)."""


def shard_file(rank: int) -> str:
    return f"shard-r{rank}.pt"


def is_shard_file(name: str) -> bool:
    return name.startswith("shard-r") and name.endswith(".pt") and name[7:-3].isdigit()


def rank_of_file(name: str) -> int:
    """The saved rank whose file ``name`` (``shard_file``'s) is."""
    return int(name[len("shard-r") : -len(".pt")])


def chunk_rows(rows: int, world: int, rank: int) -> tuple[int, int]:
    """The rows of dim 0 rank ``rank`` holds of ``rows``, split as ``torch.chunk`` (FSDP2's
    Shard(0)): chunks of ceil(rows/world), the last ranks' possibly short or empty."""
    if world < 1 or not 0 <= rank < world or rows < 0:
        raise ValueError(f"no rank {rank} of {world} for {rows} rows")
    size = -(-rows // world)
    return min(rank * size, rows), min((rank + 1) * size, rows)


@dataclass(frozen=True)
class TensorIndex:
    shape: tuple[int, ...]
    dtype: str
    rows: tuple[tuple[int, int], ...]  # per saved rank


@dataclass(frozen=True)
class ShardIndex:
    world: int
    tensors: dict[str, TensorIndex]

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT,
            "world": self.world,
            "tensors": {
                k: {"shape": list(t.shape), "dtype": t.dtype, "rows": [list(r) for r in t.rows]}
                for k, t in sorted(self.tensors.items())
            },
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def build_index(world: int, parts: list[Mapping[str, tuple[list[int], str, tuple[int, int]]]]) -> ShardIndex:
    """The index from what each rank says it holds (rank r's ``{key: (shape, dtype, rows)}``,
    in rank order); every rank must name the same tensors with the same shape and dtype."""
    if len(parts) != world:
        raise ShardIndexError(f"{len(parts)} ranks reported shards, expected {world}")
    keys = set(parts[0])
    tensors: dict[str, TensorIndex] = {}
    for r, part in enumerate(parts):
        if set(part) != keys:
            raise ShardIndexError(f"rank {r} holds other tensors than rank 0")
    for key in sorted(keys):
        shape, dtype = tuple(parts[0][key][0]), parts[0][key][1]
        rows = []
        for r, part in enumerate(parts):
            if tuple(part[key][0]) != shape or part[key][1] != dtype:
                raise ShardIndexError(f"rank {r} holds {key} with another shape or dtype than rank 0")
            rows.append(tuple(part[key][2]))
        tensors[key] = TensorIndex(shape, dtype, tuple(rows))  # type: ignore[arg-type]
    index = ShardIndex(world, tensors)
    check_index(index)
    return index


def _int(value: Any, what: str, lo: int = 0, hi: int | None = None) -> int:
    if type(value) is not int or value < lo or (hi is not None and value > hi):
        raise ShardIndexError(f"{INDEX_NAME}: {what} is not an integer in range")
    return value


def parse_index(data: bytes) -> ShardIndex:
    """``shards.json`` as written by ``ShardIndex.to_json``; ShardIndexError for anything else."""
    if len(data) > MAX_INDEX_BYTES:
        raise ShardIndexError(f"{INDEX_NAME}: {len(data)} bytes, more than {MAX_INDEX_BYTES}")
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ShardIndexError(f"{INDEX_NAME}: not JSON ({type(exc).__name__})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ShardIndexError(f"{INDEX_NAME}: not format {FORMAT}")
    world = _int(body.get("world"), "world", 1, MAX_WORLD)
    raw = body.get("tensors")
    if not isinstance(raw, dict):
        raise ShardIndexError(f"{INDEX_NAME}: tensors is not an object")
    tensors: dict[str, TensorIndex] = {}
    for key, t in raw.items():
        if not isinstance(t, dict) or not isinstance(t.get("shape"), list) or not isinstance(t.get("rows"), list):
            raise ShardIndexError(f"{INDEX_NAME}: tensor {key[:100]!r} is not an object with shape and rows")
        shape = t["shape"]
        if not 1 <= len(shape) <= MAX_DIMS:
            raise ShardIndexError(f"{INDEX_NAME}: tensor {key[:100]!r} has {len(shape)} dimensions")
        dims = tuple(_int(d, f"a dimension of {key[:100]!r}") for d in shape)
        if t.get("dtype") not in DTYPES:
            raise ShardIndexError(f"{INDEX_NAME}: tensor {key[:100]!r} has dtype {str(t.get('dtype'))[:40]!r}")
        rows = t["rows"]
        if len(rows) != world or not all(isinstance(r, list) and len(r) == 2 for r in rows):
            raise ShardIndexError(f"{INDEX_NAME}: tensor {key[:100]!r} does not give rows for each of {world} ranks")
        spans = tuple((_int(a, "a row"), _int(b, "a row")) for a, b in rows)
        tensors[key] = TensorIndex(dims, t["dtype"], spans)
    index = ShardIndex(world, tensors)
    check_index(index)
    return index


def check_index(index: ShardIndex) -> None:
    """Each tensor's rows are the ranks' contiguous, in-order cover of its dim 0."""
    for key, t in index.tensors.items():
        at = 0
        for r, (start, end) in enumerate(t.rows):
            if start != at or end < start:
                raise ShardIndexError(f"{INDEX_NAME}: rank {r}'s rows of {key[:100]!r} do not follow on")
            at = end
        if at != t.shape[0]:
            raise ShardIndexError(f"{INDEX_NAME}: the rows of {key[:100]!r} cover {at} of {t.shape[0]}")


def overlapping(t: TensorIndex, start: int, end: int) -> list[tuple[int, int, int]]:
    """The saved ranks holding rows of ``[start, end)``: (rank, first row, end row) of the
    overlap, in rank order."""
    out = []
    for r, (a, b) in enumerate(t.rows):
        lo, hi = max(a, start), min(b, end)
        if lo < hi:
            out.append((r, lo, hi))
    return out


def files_needed(index: ShardIndex, world: int, rank: int) -> list[str]:
    """The rank files rank ``rank`` of ``world`` reads to load its own shards: those
    holding rows it now holds (at the saved world size, its own file alone)."""
    ranks: set[int] = set()
    for t in index.tensors.values():
        start, end = chunk_rows(t.shape[0], world, rank)
        ranks.update(r for r, _, _ in overlapping(t, start, end))
    return [shard_file(r) for r in sorted(ranks)]
