"""A worker's data (orchestrator/runtime/loop/dataflow.py): how many samples a batch holds, whatever
its shape. WorkerData over the loaders is driven by the train loop's tests."""

from __future__ import annotations

import pytest
import torch

from orchestrator.runtime.loop.dataflow import rows

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("batch", "n"),
    [
        (torch.zeros(5, 3), 5),
        (torch.tensor(1.0), 1),
        ((torch.zeros(4, 2), torch.zeros(4)), 4),
        ({"ids": torch.zeros(3, 8), "mask": torch.zeros(3, 8)}, 3),
        ([{"x": torch.zeros(0)}, torch.zeros(6)], 6),
        ({"name": "no tensor"}, 0),
        ("text", 0),
    ],
)
def test_rows_is_the_leading_size_of_the_first_tensor_with_rows(batch: object, n: int) -> None:
    assert rows(batch) == n
