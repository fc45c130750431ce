"""A generated classification set big enough that loading matters (data.samples x data.features).

Gaussian inputs labelled by a fixed random linear teacher (10 classes) plus noise,
all drawn from ``job.seed``: the same config writes the same bytes. It is made on
this machine (never downloaded) once, into ``data.cache_dir`` as ``.npy`` parts of
``PART_ROWS`` rows, each row the features then the label. Both loaders read those
files: ``sharded`` memory-maps them and gathers its rows, ``ray_data`` reads them
with ``ray.data.read_numpy`` (one block per part).
"""

from __future__ import annotations

import fcntl
import math
import os
from typing import Any

import numpy as np
import torch
from torch import nn

from orchestrator.workloads.base import Classifier
from orchestrator.workloads.data import sharded_indices

PART_ROWS = 10_000
CLASSES = 10
NOISE = 0.5


def dataset_dir(cache_dir: str, seed: int, samples: int, features: int) -> str:
    return os.path.join(cache_dir, f"synthetic-s{seed}-{samples}x{features}")


def part_rows(samples: int) -> list[int]:
    n = math.ceil(samples / PART_ROWS)
    return [min(PART_ROWS, samples - i * PART_ROWS) for i in range(n)]


def generate_part(seed: int, index: int, rows: int, features: int) -> np.ndarray:
    teacher = np.random.default_rng([seed, 0]).standard_normal((features, CLASSES)).astype(np.float32)
    rng = np.random.default_rng([seed, 1, index])
    x = rng.standard_normal((rows, features), dtype=np.float32)
    logits = x @ teacher / math.sqrt(features) + NOISE * rng.standard_normal((rows, CLASSES), dtype=np.float32)
    y = logits.argmax(axis=1).astype(np.float32)
    return np.concatenate([x, y[:, None]], axis=1)


def ensure_dataset(cache_dir: str, seed: int, samples: int, features: int) -> list[str]:
    """The part files, written once (under a lock, each file renamed into place)."""
    folder = dataset_dir(cache_dir, seed, samples, features)
    sizes = part_rows(samples)
    paths = [os.path.join(folder, f"part-{i:05d}.npy") for i in range(len(sizes))]
    done = os.path.join(folder, "COMPLETE")
    if os.path.exists(done):
        return paths
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two workers on one machine generate it once
        if not os.path.exists(done):
            for i, (path, rows) in enumerate(zip(paths, sizes, strict=True)):
                tmp = f"{path}.tmp-{os.getpid()}.npy"
                np.save(tmp, generate_part(seed, i, rows, features))
                os.replace(tmp, path)
            with open(done, "w") as fh:
                fh.write(f"{samples} rows x {features} features, seed {seed}\n")
    return paths


class Synthetic(Classifier):
    @classmethod
    def from_job(cls, job: dict[str, Any], data: dict[str, Any]) -> Synthetic:
        return cls(job, data)

    def __init__(self, job: dict[str, Any], data: dict[str, Any] | None = None) -> None:
        data = data or {}
        self.seed = int(job["seed"])
        self.batch_size = int(job["batch_size"])
        self.lr = float(job["lr"])
        self.hidden = int(job["hidden_size"])
        self.features = int(data.get("features", 256))
        samples = int(data.get("samples", 200_000))
        cache = str(data.get("cache_dir") or os.path.expanduser("~/.orchestrator/data"))
        paths = ensure_dataset(cache, self.seed, samples, self.features)
        # Whole parts are held out for evaluation (at least one), the rest is the training set.
        n_eval = min(len(paths) - 1, max(1, round(len(paths) * float(job["eval_fraction"]))))
        if n_eval < 1:
            raise ValueError(f"data.samples={samples} gives one part of {PART_ROWS} rows; need two or more")
        self._files = paths[: len(paths) - n_eval]
        self._parts: list[np.ndarray] | None = None
        sizes = part_rows(samples)
        self._offsets = np.cumsum([0, *sizes[: len(self._files)]])
        ev = np.concatenate([np.load(p) for p in paths[len(paths) - n_eval :]])
        self.x_eval = torch.from_numpy(ev[:, :-1].copy())
        self.y_eval = torch.from_numpy(ev[:, -1]).long()

    def train_size(self) -> int:
        return int(self._offsets[-1])

    def train_files(self) -> list[str]:
        return list(self._files)

    def train_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        rows = np.concatenate([np.load(p) for p in self._files])
        return rows[:, :-1], rows[:, -1]

    def _rows(self, idx: np.ndarray) -> np.ndarray:
        if self._parts is None:
            # Memory-mapped: a worker reads only the pages of the rows it takes.
            self._parts = [np.load(p, mmap_mode="r") for p in self._files]
        part = np.searchsorted(self._offsets, idx, side="right") - 1
        out = np.empty((len(idx), self.features + 1), dtype=np.float32)
        for p in np.unique(part):
            sel = part == p
            out[sel] = self._parts[p][idx[sel] - self._offsets[p]]
        return out

    def batch(self, step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = sharded_indices(self.train_size(), self.seed, self.batch_size, step, rank, world).numpy()
        rows = self._rows(idx)
        return torch.from_numpy(rows[:, :-1].copy()), torch.from_numpy(rows[:, -1]).long()

    def model(self) -> nn.Module:
        h = self.hidden
        return nn.Sequential(nn.Linear(self.features, h), nn.ReLU(), nn.Linear(h, CLASSES))

    def optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9)
