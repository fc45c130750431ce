"""The ways a worker gets its batches, all resumable exactly.

Loaders count in micro-batches (``trainer.grad_accum_steps`` of them make one
optimizer step; one when there is no accumulation): ``batch(i)`` returns this
rank's micro-batch ``i`` (1-based) and ``position(n)`` says where the stream
stands after ``n`` of them.

- ``sharded``: each worker reads its own rows in-process. Epoch ``e`` is a
  permutation of the training set seeded by ``(seed, e)``; global batch ``k`` is a
  slice of it and rank ``r`` takes its part of the slice, so a batch is a pure
  function of (epoch, batch index, rank) and nothing moves between processes.
- ``dataset``: a workload's map-style ``dataset()``: epoch ``e`` is a permutation
  of its indices seeded by ``(seed, e)``; each micro-batch takes the next
  ``job.batch_size / grad_accum_steps`` indices of it, rank ``r`` its equal part,
  collated by PyTorch's ``default_collate``. Nothing is replayed on a resume: the
  position says which indices come next.
- ``ray_data``: a Ray Data dataset is handed to the trainer; Ray Train splits it
  across the workers (``streaming_split``, equal, order preserved) and each worker
  iterates its shard with ``iter_torch_batches``, shuffled per epoch by a local
  buffer seeded by ``(seed, e)``. Block order, the split and the shuffle are then
  all deterministic, so the position alone says which batch comes next; a resume
  re-opens the epoch and skips the batches already trained on.

The data position (loader, epoch, batch index, seed) goes into every checkpoint.

``rank`` and ``world`` are logical: the run's ``trainer.workers`` shards, whatever
number of workers trains them (an elastic world builds one loader per shard it
trains, see ``runtime/loop/dataflow.py``), so the epoch length and the position are the
same at every world size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

DATASET_KEY = "train"
READ_TASK_CPUS = 0
SEED_STRIDE = 1_000_003


def epoch_seed(seed: int, epoch: int) -> int:
    return seed * SEED_STRIDE + epoch


@dataclass(frozen=True)
class DataPosition:
    """Where the data stream stands after ``step`` steps: ``batch_index`` batches of
    ``epoch`` are consumed."""

    loader: str
    epoch: int
    batch_index: int
    seed: int
    steps_per_epoch: int

    @staticmethod
    def after(loader: str, step: int, seed: int, steps_per_epoch: int) -> DataPosition:
        epoch, k = divmod(step, steps_per_epoch)
        return DataPosition(loader, epoch, k, seed, steps_per_epoch)

    @property
    def step(self) -> int:
        return self.epoch * self.steps_per_epoch + self.batch_index

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class DataMismatch(Exception):
    """A checkpoint's data position cannot continue under this config."""


def check_resumable(saved: dict[str, Any], want: DataPosition) -> None:
    """A checkpoint's position must come from the same loader, seed and epoch length."""
    for key in ("loader", "seed", "steps_per_epoch"):
        if saved.get(key) != getattr(want, key):
            raise DataMismatch(
                f"the checkpoint's data position has {key}={saved.get(key)!r}, this run {getattr(want, key)!r}; "
                "an exact resume needs the same data.loader, job.seed, job.batch_size and trainer.workers"
            )


# A workload's batch() with no train_size(): one endless epoch.
ENDLESS = 2**62


class ShardedLoader:
    name = "sharded"

    def __init__(self, workload: Any, rank: int, world: int, seed: int, batch_size: int) -> None:
        self.workload, self.rank, self.world, self.seed = workload, rank, world, seed
        size = getattr(workload, "train_size", None)
        self.steps_per_epoch = max(1, size() // (batch_size * world)) if callable(size) else ENDLESS

    def position(self, step: int) -> DataPosition:
        return DataPosition.after(self.name, step, self.seed, self.steps_per_epoch)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        # The workload owns the slicing (it knows its storage); step is 1-based.
        return self.workload.batch(step, self.rank, self.world)

    def close(self) -> None:
        pass


class DatasetLoader:
    name = "dataset"

    def __init__(self, dataset: Any, rank: int, world: int, seed: int, global_batch: int, accum: int) -> None:
        self.dataset, self.rank, self.world, self.seed = dataset, rank, world, seed
        self.rows = global_batch // (world * accum)  # this rank's rows in one micro-batch
        self.size = len(dataset)
        self.steps_per_epoch = self.size // (self.rows * world)
        if self.steps_per_epoch < 1:
            raise ValueError(
                f"the workload's dataset() has {self.size} items, fewer than one micro-batch of all workers "
                f"({self.rows * world}); lower job.batch_size or give the dataset more items"
            )
        self._epoch: int | None = None
        self._perm: torch.Tensor | None = None

    def position(self, micro: int) -> DataPosition:
        return DataPosition.after(self.name, micro, self.seed, self.steps_per_epoch)

    def indices(self, i: int) -> list[int]:
        """Dataset indices of this rank's micro-batch ``i`` (1-based)."""
        epoch, k = divmod(i - 1, self.steps_per_epoch)
        if epoch != self._epoch:
            gen = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
            self._perm, self._epoch = torch.randperm(self.size, generator=gen), epoch
        assert self._perm is not None
        start = (k * self.world + self.rank) * self.rows
        return self._perm[start : start + self.rows].tolist()

    def batch(self, i: int) -> Any:
        from torch.utils.data import default_collate

        return default_collate([self.dataset[j] for j in self.indices(i)])

    def close(self) -> None:
        pass


def sharded_indices(n: int, seed: int, batch_size: int, step: int, rank: int, world: int) -> torch.Tensor:
    """Row indices of ``rank``'s part of global batch ``step`` (1-based)."""
    per_step = batch_size * world
    steps_per_epoch = max(1, n // per_step)
    epoch, k = divmod(step - 1, steps_per_epoch)
    gen = torch.Generator().manual_seed(epoch_seed(seed, epoch))
    perm = torch.randperm(n, generator=gen)
    start = k * per_step + rank * batch_size
    return perm[start : start + batch_size]


class RayDataLoader:
    name = "ray_data"

    def __init__(
        self, shard: Any, train_size: int, rank: int, world: int, seed: int, batch_size: int, buffer_rows: int
    ) -> None:
        self.shard, self.rank, self.world, self.seed = shard, rank, world, seed
        self.batch_size, self.buffer_rows = batch_size, buffer_rows
        # streaming_split(equal=True) gives every worker floor(n / world) rows.
        self.steps_per_epoch = max(1, (train_size // world) // batch_size)
        self._epoch: int | None = None
        self._it: Iterator[dict[str, torch.Tensor]] | None = None
        self._next_step = 1

    def position(self, step: int) -> DataPosition:
        return DataPosition.after(self.name, step, self.seed, self.steps_per_epoch)

    def _open(self, epoch: int) -> None:
        self._epoch = epoch
        self._it = iter(
            self.shard.iter_torch_batches(
                batch_size=self.batch_size,
                drop_last=True,
                local_shuffle_buffer_size=self.buffer_rows,
                local_shuffle_seed=epoch_seed(self.seed, epoch) % (2**32),
                device="cpu",
            )
        )

    def _next(self) -> dict[str, torch.Tensor]:
        assert self._it is not None
        try:
            return next(self._it)
        except StopIteration:
            raise RuntimeError(
                f"rank {self.rank}: epoch {self._epoch} of the Ray Data shard ended before "
                f"{self.steps_per_epoch} batches; the split was not equal"
            ) from None

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps come in order; the first one after a restore seeks (re-opens its epoch, skips)."""
        pos = self.position(step - 1)
        if self._it is None or step != self._next_step or pos.epoch != self._epoch:
            self._open(pos.epoch)
            for _ in range(pos.batch_index):
                self._next()
        b = self._next()
        self._next_step = step + 1
        if pos.batch_index + 1 == self.steps_per_epoch:
            self._drain()
        data = b["data"]
        return data[:, :-1].contiguous(), data[:, -1].long()

    def _drain(self) -> None:
        # Every worker must finish the epoch's iterator (drop_last leaves a tail) before the
        # split coordinator starts the next epoch.
        assert self._it is not None
        for _ in self._it:
            pass
        self._it = None

    def close(self) -> None:
        self._it = None


def ray_dataset(workload: Any) -> Any:
    """The workload's training set as a Ray Data dataset: one ``data`` column, features then label."""
    import ray.data

    files = workload.train_files() if hasattr(workload, "train_files") else None
    if files:
        # read_numpy with no CPU of its own: the training workers hold every CPU of the
        # cluster (trainer.workers x cpus_per_worker), and a read task that waits for a
        # free CPU would wait forever. The reads share the workers' cores instead.
        from ray.data._internal.datasource.numpy_datasource import NumpyDatasource

        return ray.data.read_datasource(
            NumpyDatasource(list(files)), num_cpus=READ_TASK_CPUS, override_num_blocks=len(files)
        )
    x, y = workload.train_arrays()
    rows = np.concatenate([np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.float32)[:, None]], axis=1)
    return ray.data.from_numpy(rows)


def data_config() -> Any:
    """Ray Train's split, made deterministic: order preserved, no locality-driven dispatch."""
    import ray.train
    from ray.data import ExecutionOptions

    return ray.train.DataConfig(execution_options=ExecutionOptions(preserve_order=True), enable_shard_locality=False)
