"""A sharded model's state without a process group: what holds no DTensor is the rest,
which rank 0 saves for every rank (sharded ranks' files: tests/integration, same path)."""

from __future__ import annotations

import pytest
import torch

from orchestrator.runtime.checkpoint.shard_index import build_index, parse_index
from orchestrator.runtime.checkpoint.sharding import _walk, load_shards, save_shards
from tests.support.nets import Net

pytestmark = pytest.mark.unit


def _trained() -> tuple[Net, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_every_leaf_is_walked_with_its_path() -> None:
    tree = {"a": [1, {"b": 2}], "c": 3}
    assert list(_walk(tree)) == [(("a", "0"), 1), (("a", "1", "b"), 2), (("c",), 3)]


def test_a_model_with_no_shards_is_all_rest_and_loads_back_exactly() -> None:
    model, optimizer = _trained()
    tensors, described, rest = save_shards(model, optimizer, 0, 1)
    assert tensors == {} and described == {} and rest is not None and set(rest) == {"model", "optimizer"}
    index = parse_index(build_index(1, [described]).to_json())
    fresh = Net()
    fresh_optimizer = torch.optim.Adam(fresh.parameters())
    load_shards(fresh, fresh_optimizer, index, 0, 1, lambda rank: {}, rest)
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert fresh_optimizer.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]


def test_only_rank_0_keeps_the_rest() -> None:
    model, optimizer = _trained()
    assert save_shards(model, optimizer, 1, 2)[2] is None


def test_a_rest_that_lacks_a_part_is_refused_in_one_line() -> None:
    model, optimizer = _trained()
    index = parse_index(build_index(1, [{}]).to_json())
    with pytest.raises(ValueError, match="not in the checkpoint"):
        load_shards(model, optimizer, index, 0, 1, lambda rank: {}, {"model": None})
