"""What the training loop needs from a workload. The loop owns steps, checkpoints and faults."""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn


class Workload(Protocol):
    def __init__(self, job: dict[str, Any], data: dict[str, Any] | None = None) -> None: ...

    def train_size(self) -> int:
        """Rows in the training set (the loaders derive an epoch's length from it)."""

    def train_arrays(self) -> tuple[Any, Any]:
        """Features and labels of the training set (numpy), for data.loader=ray_data."""

    def model(self) -> torch.nn.Module:
        """A fresh model; the loop seeds torch before calling this."""

    def optimizer(self, params: Any) -> torch.optim.Optimizer: ...

    def batch(self, step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch for ``step`` (1-based) on ``rank`` under data.loader=sharded: a pure
        function of its arguments, so the data position after a restore is the step alone."""

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor: ...

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        """Held-out metrics for the final summary."""


class Classifier:
    """Cross-entropy training and held-out accuracy, for workloads that set
    ``x_eval`` and ``y_eval`` (tensors of the held-out features and labels)."""

    x_eval: torch.Tensor
    y_eval: torch.Tensor

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(model(x), y)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        with torch.no_grad():
            logits = model(self.x_eval)
            loss = nn.functional.cross_entropy(logits, self.y_eval).item()
            acc = (logits.argmax(dim=1) == self.y_eval).float().mean().item()
        return {"accuracy": acc, "eval_loss": loss}
