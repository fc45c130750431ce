"""The workload protocol: what the training loop needs from a user's code.

A workload is a class constructed as ``Class(params)``, where ``params`` is
``job.params`` (a dict; validated against ``Class.Params`` when the class declares
that dataclass, and then filled with its defaults). The loop owns steps,
devices, checkpoints, faults and the data position; the workload only says what
to train and how.

Required:
- ``model() -> nn.Module``: a fresh model; torch is seeded from ``job.seed`` first.
- ``optimizer(model) -> torch.optim.Optimizer``: over the model already on its device.
- ``loss(model, batch) -> Tensor``: a scalar; ``model`` may be wrapped in DDP.
- one of ``batch(step, rank, world)`` (a pure function of its arguments: the data
  position after a restore is the step alone) or ``dataset() -> Dataset``
  (map-style; the loop samples each rank's share of the global batch
  ``job.batch_size`` from ``(job.seed, epoch)`` and collates with PyTorch's
  ``default_collate``).

Optional:
- ``scheduler(optimizer)``: a torch LR scheduler, stepped once per optimizer step.
- ``evaluate(model) -> dict[str, float]``: held-out metrics for the summary.
- ``state_dict()`` / ``load_state_dict(state)``: the workload's own extra state
  (tensors, numbers, strings, lists and dicts of them: it is loaded with
  ``weights_only=True``).

Every method must be deterministic for a resumed run to end with exactly the
weights of an uninterrupted one.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn


@runtime_checkable
class Workload(Protocol):
    def model(self) -> nn.Module: ...

    def optimizer(self, model: nn.Module) -> torch.optim.Optimizer: ...

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor: ...


class Stateful(Protocol):
    """A named part of a checkpoint: the checkpointer saves and loads it without looking inside."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> Any: ...


class Classifier:
    """Cross-entropy training and held-out accuracy, for workloads that set
    ``x_eval`` and ``y_eval`` (tensors of the held-out features and labels)."""

    x_eval: torch.Tensor
    y_eval: torch.Tensor

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(model(x), y)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        device = next(model.parameters()).device
        with torch.no_grad():
            logits = model(self.x_eval.to(device))
            y = self.y_eval.to(device)
            loss = nn.functional.cross_entropy(logits, y).item()
            acc = (logits.argmax(dim=1) == y).float().mean().item()
        return {"accuracy": acc, "eval_loss": loss}
