"""``SeqClassifier``: the sum-bucket task as an orchestrator workload (``job.workload``).

The orchestrator's training loop owns steps, devices, DDP, checkpoints and the data
order; this class only says what to train. It uses ``dataset()`` mode: the loop draws
each optimizer step's global batch (``job.batch_size`` items) from a permutation of
the dataset seeded by ``(job.seed, epoch)``, gives each worker its equal part and
collates it with PyTorch's ``default_collate``, so ``loss`` gets ``(x, y)`` tensors.

Besides the model and the optimizer, a checkpoint holds the StepLR scheduler (from
``scheduler()``) and this class's own ``state_dict()``: a running average of the
training loss that ``evaluate()`` reports. Every method is deterministic, so a run
that fails over ends with exactly the weights of one that did not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from seqmodels.data import SeqGRU, SumBuckets, accuracy_and_loss, train_and_eval

# The running loss average forgets this fraction per micro-batch.
EMA_DECAY = 0.98


@dataclass
class Params:
    """``job.params``: checked against these fields (names and types) before anything launches."""

    # Data: sequence length, values in [0, vocab), items in the training and held-out sets,
    # and the seed both are generated from (independent of job.seed, which orders batches).
    seq_len: int = 20
    vocab: int = 10
    train_size: int = 8192
    eval_size: int = 1024
    data_seed: int = 1234
    # Model: embedding width and GRU hidden size.
    embed: int = 32
    hidden: int = 64
    # Adam's learning rate, multiplied by lr_gamma every lr_step optimizer steps (StepLR).
    lr: float = 0.01
    lr_step: int = 200
    lr_gamma: float = 0.5


class SeqClassifier:
    Params = Params

    def __init__(self, params: dict[str, Any]) -> None:
        # The orchestrator has already checked names and types against Params; ranges are ours.
        self.p = Params(**params)
        for key in ("seq_len", "vocab", "train_size", "eval_size", "embed", "hidden", "lr_step"):
            if getattr(self.p, key) < 1:
                raise ValueError(f"job.params.{key}: got {getattr(self.p, key)}; expected an integer >= 1")
        if not self.p.lr > 0 or not 0 < self.p.lr_gamma <= 1:
            raise ValueError(
                f"job.params.lr / lr_gamma: got {self.p.lr} / {self.p.lr_gamma}; need lr > 0, 0 < gamma <= 1"
            )
        self._data: tuple[SumBuckets, SumBuckets] | None = None
        # Our own checkpointed state: the loss average and how many micro-batches fed it.
        self.loss_ema = 0.0
        self.batches = 0

    def _sets(self) -> tuple[SumBuckets, SumBuckets]:
        if self._data is None:
            p = self.p
            self._data = train_and_eval(p.train_size, p.eval_size, p.seq_len, p.vocab, p.data_seed)
        return self._data

    # --- required -------------------------------------------------------------------------
    def model(self) -> nn.Module:
        return SeqGRU(self.p.vocab, self.p.embed, self.p.hidden)

    def optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=self.p.lr)

    def dataset(self) -> SumBuckets:
        return self._sets()[0]

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(model(x), y)
        self.loss_ema = EMA_DECAY * self.loss_ema + (1 - EMA_DECAY) * loss.item()
        self.batches += 1
        return loss

    # --- optional -------------------------------------------------------------------------
    def scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.StepLR:
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=self.p.lr_step, gamma=self.p.lr_gamma)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        metrics = accuracy_and_loss(model, self._sets()[1])
        # Bias-corrected, as Adam corrects its moments: the average starts at 0.
        if self.batches:
            metrics["train_loss_ema"] = self.loss_ema / (1 - EMA_DECAY**self.batches)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"loss_ema": self.loss_ema, "batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loss_ema = float(state["loss_ema"])
        self.batches = int(state["batches"])
