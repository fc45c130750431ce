"""The task both trainers learn: sort integer sequences into three classes by their sum.

Each item is a sequence of ``seq_len`` integers drawn uniformly from ``[0, vocab)``;
its label says whether the sequence's sum is low (0), middling (1) or high (2), the
cut points being the sums at one and two thirds of the training set. A model has to
add up a whole sequence to get it right, which a small GRU learns in a few hundred
steps.

Everything is generated from a seed with torch's own generator, so every worker and
every attempt (after a failover too) builds the same data without downloading
anything, and the training set a resumed run sees is the one it started with.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset

CLASSES = 3


def sum_cuts(sums: torch.Tensor) -> tuple[int, int]:
    """The sums at one and two thirds of ``sums`` sorted: the class boundaries."""
    ordered = sums.sort().values
    n = len(ordered)
    return int(ordered[n // 3]), int(ordered[2 * n // 3])


class SumBuckets(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``n`` sequences and their labels; ``cuts`` from the training set (None: from these sums)."""

    def __init__(self, n: int, seq_len: int, vocab: int, seed: int, cuts: tuple[int, int] | None = None) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, vocab, (n, seq_len), generator=generator)
        sums = self.x.sum(dim=1)
        self.cuts = cuts if cuts is not None else sum_cuts(sums)
        low, high = self.cuts
        self.y = (sums > low).long() + (sums > high).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def train_and_eval(
    train_size: int, eval_size: int, seq_len: int, vocab: int, seed: int
) -> tuple[SumBuckets, SumBuckets]:
    """The training set from ``seed``, the held-out set from ``seed + 1`` with the training set's cuts."""
    train = SumBuckets(train_size, seq_len, vocab, seed)
    held_out = SumBuckets(eval_size, seq_len, vocab, seed + 1, cuts=train.cuts)
    return train, held_out


class SeqGRU(nn.Module):
    """Embedding, one GRU layer, a linear head on the last hidden state."""

    def __init__(self, vocab: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.gru = nn.GRU(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.embed(x))
        return self.head(out[:, -1])


def accuracy_and_loss(model: nn.Module, data: SumBuckets) -> dict[str, float]:
    """Held-out accuracy and mean cross-entropy, in eval mode, without gradients."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(data.x.to(device))
            y = data.y.to(device)
            loss = nn.functional.cross_entropy(logits, y).item()
            accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    finally:
        model.train(was_training)
    return {"accuracy": accuracy, "eval_loss": loss}
