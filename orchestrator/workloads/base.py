"""What the training loop needs from a workload. The loop owns steps, checkpoints and faults."""

from __future__ import annotations

from typing import Any, Protocol

import torch


class Workload(Protocol):
    def __init__(self, job: dict[str, Any]) -> None: ...

    def model(self) -> torch.nn.Module:
        """A fresh model; the loop seeds torch before calling this."""

    def optimizer(self, params: Any) -> torch.optim.Optimizer: ...

    def batch(self, step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch for ``step`` (1-based) on ``rank``: a pure function of its arguments,
        so the data position after a restore is the step alone."""

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor: ...

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        """Held-out metrics for the final summary."""
