"""Handwritten digits: scikit-learn's bundled data set (1797 8x8 images), an MLP classifier."""

from __future__ import annotations

import gzip
import importlib.util
import os
from typing import Any

import numpy as np
import torch
from torch import nn

from orchestrator.workloads.base import Classifier
from orchestrator.workloads.data import sharded_indices


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``load_digits(return_X_y=True)``, read from the file it ships.

    Importing scikit-learn costs each Ray Train worker 1.2-1.8 s of a core at every
    attempt's start, for 1797 rows: the same file is read the way scikit-learn reads it,
    without the import. Should a scikit-learn release move the file, its loader runs."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    path = os.path.join(os.path.dirname(spec.origin or ""), "datasets", "data", "digits.csv.gz") if spec else ""
    if not os.path.isfile(path):
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        return x, y
    with gzip.open(path, mode="rt", encoding="utf-8") as fh:
        data = np.loadtxt(fh, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int, copy=False)


def _load(seed: int, eval_fraction: float) -> tuple[torch.Tensor, ...]:
    x, y = digits_arrays()
    x = (x / 16.0).astype(np.float32)
    order = np.random.RandomState(seed).permutation(len(x))
    n_eval = round(len(x) * eval_fraction)
    ev, tr = order[:n_eval], order[n_eval:]
    return (
        torch.from_numpy(x[tr]),
        torch.from_numpy(y[tr]).long(),
        torch.from_numpy(x[ev]),
        torch.from_numpy(y[ev]).long(),
    )


class Digits(Classifier):
    @classmethod
    def from_job(cls, job: dict[str, Any], data: dict[str, Any]) -> Digits:
        return cls(job, data)

    def __init__(self, job: dict[str, Any], data: dict[str, Any] | None = None) -> None:
        self.seed = int(job["seed"])
        self.batch_size = int(job["batch_size"])
        self.lr = float(job["lr"])
        self.hidden = int(job["hidden_size"])
        self.x, self.y, self.x_eval, self.y_eval = _load(self.seed, float(job["eval_fraction"]))

    def model(self) -> nn.Module:
        h = self.hidden
        return nn.Sequential(nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))

    def optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9)

    def train_size(self) -> int:
        return len(self.x)

    def train_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.x.numpy(), self.y.numpy()

    def batch(self, step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = sharded_indices(len(self.x), self.seed, self.batch_size, step, rank, world)
        return self.x[idx], self.y[idx]
