"""What a workload is (orchestrator/workloads/base.py): the Classifier's loss and held-out figures."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from orchestrator.workloads.base import Classifier

pytestmark = pytest.mark.unit


class _Two(Classifier):
    def __init__(self) -> None:
        self.x_eval = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
        self.y_eval = torch.tensor([0, 1, 1])


def test_loss_is_cross_entropy_and_evaluate_gives_accuracy_and_eval_loss() -> None:
    model = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2) * 10)
    w = _Two()
    x, y = w.x_eval, w.y_eval
    assert torch.equal(w.loss(model, (x, y)), nn.functional.cross_entropy(model(x), y))
    figures = w.evaluate(model)
    assert figures["accuracy"] == pytest.approx(2 / 3)
    assert figures["eval_loss"] == pytest.approx(nn.functional.cross_entropy(model(x), y).item())
