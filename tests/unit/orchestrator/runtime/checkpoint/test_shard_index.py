"""The index of a sharded checkpoint: its codec, hostile input refused, and which rank
files a rank reads at its own and at another world size."""

from __future__ import annotations

import json

import pytest
import torch

from orchestrator.runtime.checkpoint.shard_index import (
    INDEX_NAME,
    ShardIndexError,
    build_index,
    chunk_rows,
    files_needed,
    is_shard_file,
    overlapping,
    parse_index,
    shard_file,
)

pytestmark = pytest.mark.unit


def _parts(shapes: dict[str, list[int]], world: int) -> list[dict[str, tuple[list[int], str, tuple[int, int]]]]:
    return [{k: (s, "float32", chunk_rows(s[0], world, r)) for k, s in shapes.items()} for r in range(world)]


SHAPES = {"model/w": [10, 4], "model/b": [3], "optimizer/state/w/exp_avg": [10, 4]}


@pytest.mark.parametrize("rows", [0, 1, 3, 7, 10, 64])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_chunk_rows_is_torch_chunk(rows: int, world: int) -> None:
    chunks = list(torch.arange(rows).chunk(world)) if rows else []
    got = [chunk_rows(rows, world, r) for r in range(world)]
    want = [(int(c[0]), int(c[-1]) + 1) for c in chunks] + [(rows, rows)] * (world - len(chunks))
    assert got == want


def test_the_index_round_trips() -> None:
    index = build_index(2, _parts(SHAPES, 2))
    assert parse_index(index.to_json()) == index
    assert index.tensors["model/w"].rows == ((0, 5), (5, 10))
    assert index.tensors["model/b"].rows == ((0, 2), (2, 3))


def test_at_the_saved_world_size_each_rank_reads_its_own_file_alone() -> None:
    index = build_index(4, _parts(SHAPES, 4))
    assert [files_needed(index, 4, r) for r in range(4)] == [[shard_file(r)] for r in range(4)]


def test_at_another_world_size_a_rank_reads_the_files_overlapping_its_rows() -> None:
    index = build_index(2, _parts(SHAPES, 2))
    assert files_needed(index, 1, 0) == [shard_file(0), shard_file(1)]
    four = build_index(4, _parts({"model/w": [8, 2]}, 4))
    assert files_needed(four, 2, 0) == [shard_file(0), shard_file(1)]
    assert files_needed(four, 2, 1) == [shard_file(2), shard_file(3)]
    assert overlapping(four.tensors["model/w"], 1, 5) == [(0, 1, 2), (1, 2, 4), (2, 4, 5)]


def test_ranks_that_disagree_make_no_index() -> None:
    parts = _parts(SHAPES, 2)
    parts[1]["model/w"] = ([11, 4], "float32", (5, 10))
    with pytest.raises(ShardIndexError, match="rank 1 holds model/w with another shape"):
        build_index(2, parts)
    parts = _parts(SHAPES, 2)
    del parts[1]["model/b"]
    with pytest.raises(ShardIndexError, match="rank 1 holds other tensors"):
        build_index(2, parts)
    with pytest.raises(ShardIndexError, match="1 ranks reported"):
        build_index(2, _parts(SHAPES, 2)[:1])


def _body() -> dict:
    return json.loads(build_index(2, _parts(SHAPES, 2)).to_json())


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda b: b.update(format=2), "not format 1"),
        (lambda b: b.update(world=0), "world"),
        (lambda b: b.update(world=True), "world"),
        (lambda b: b.update(tensors=[]), "tensors is not an object"),
        (lambda b: b["tensors"]["model/w"].update(dtype="object"), "dtype"),
        (lambda b: b["tensors"]["model/w"].update(shape=[]), "0 dimensions"),
        (lambda b: b["tensors"]["model/w"].update(shape=[10, -1]), "not an integer"),
        (lambda b: b["tensors"]["model/w"].update(rows=[[0, 5]]), "rows for each of 2"),
        (lambda b: b["tensors"]["model/w"].update(rows=[[0, 5], [6, 10]]), "do not follow on"),
        (lambda b: b["tensors"]["model/w"].update(rows=[[0, 5], [5, 9]]), "cover 9 of 10"),
        (lambda b: b["tensors"]["model/w"].update(rows=[[0, 5.0], [5, 10]]), "not an integer"),
        (lambda b: b["tensors"].update(x=None), "not an object"),
    ],
)
def test_a_hostile_index_is_refused_in_one_line(change: object, match: str) -> None:
    body = _body()
    change(body)  # type: ignore[operator]
    with pytest.raises(ShardIndexError, match=match) as err:
        parse_index(json.dumps(body).encode())
    assert "\n" not in str(err.value) and INDEX_NAME in str(err.value)


@pytest.mark.parametrize("data", [b"", b"{", b"[1]", b"null", b"[" * 100_000])
def test_what_is_not_an_index_is_refused(data: bytes) -> None:
    with pytest.raises(ShardIndexError):
        parse_index(data)


def test_shard_file_names() -> None:
    assert shard_file(3) == "shard-r3.pt" and is_shard_file("shard-r3.pt")
    assert not any(is_shard_file(n) for n in ("shard-r.pt", "shard-rx.pt", "model.pt", "shards.json", "rng-rank0.pt"))
