"""Small models the sharding tests share."""

from __future__ import annotations

import torch
from torch import nn


class Net(nn.Module):
    """Two ``nn.ModuleList``s, so the default shard units (the largest list's blocks) are a choice."""

    def __init__(self) -> None:
        super().__init__()
        self.small = nn.ModuleList([nn.Linear(4, 4)])
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4), nn.ReLU()])
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in [*self.small, *self.blocks]:
            x = m(x)
        return self.head(x)
