"""What a training worker gets its data from, and what it measures about itself.

One object per worker that the training loop asks for batches, for the data
position to put in a checkpoint (and to check on restore), and for telemetry,
gathered from every rank at each checkpoint (the ranks already meet there).

Elastic worlds: the data is always cut for the run's logical world (``trainer.workers``,
L). A worker of a smaller world (w) trains the logical shards ``recovery.elastic.shards``
gives it, taking for each shard the micro-batches its logical rank would take: the
global batch, the epoch length and the data position depend on L alone, so a step is
the same samples at every w. At w == L each worker has its own shard alone.
"""

from __future__ import annotations

from typing import Any

import torch

from orchestrator.runtime.loop.telemetry import Sampler, summary
from orchestrator.wire.sections import DataSection, JobSection
from orchestrator.workloads.data import (
    DATASET_KEY,
    DataMismatch,
    DataPosition,
    DatasetLoader,
    RayDataLoader,
    ShardedLoader,
    check_resumable,
)
from recovery.elastic import shards

TELEMETRY_INTERVAL_S = 1.0


class WorkerData:
    def __init__(
        self,
        spec_data: DataSection,
        job: JobSection,
        workload: Any,
        rank: int,
        world: int,
        accum: int = 1,
        workers: int | None = None,
    ) -> None:
        self.rank, self.world, self.accum = rank, world, accum
        self.workers = world if workers is None else workers
        # The logical ranks (of ``workers``) whose micro-batches this worker trains.
        self.shards = shards(rank, world, self.workers)
        self.batch_size = job.batch_size
        seed = job.seed
        self.loaders: list[ShardedLoader | RayDataLoader | DatasetLoader]
        if callable(getattr(workload, "dataset", None)):
            items = workload.dataset()
            self.loaders = [DatasetLoader(items, s, self.workers, seed, self.batch_size, accum) for s in self.shards]
        elif spec_data.loader == "ray_data":
            import ray.train

            if self.shards != [rank]:
                # config.py refuses trainer.min_workers < trainer.workers with ray_data.
                raise ValueError(f"data.loader=ray_data splits by Ray's world ({world}), not by {self.workers}")
            self.loaders = [
                RayDataLoader(
                    ray.train.get_dataset_shard(DATASET_KEY),
                    workload.train_size(),
                    rank,
                    world,
                    seed,
                    self.batch_size,
                    spec_data.shuffle_buffer_rows,
                )
            ]
        else:
            self.loaders = [ShardedLoader(workload, s, self.workers, seed, self.batch_size) for s in self.shards]
        # Every shard's loader stands at the same position: the first one speaks for all.
        self.loader = self.loaders[0]
        self.sampler = Sampler(rank, TELEMETRY_INTERVAL_S)
        self._started = False
        self.telemetry: dict[str, Any] | None = None

    # --- batches ---------------------------------------------------------------------
    @property
    def replayable(self) -> bool:
        """Whether a step's batch can be made again as it was: each is a function of the
        step (a workload's batches or dataset), not the next of a stream (Ray Data)."""
        return not any(isinstance(loader, RayDataLoader) for loader in self.loaders)

    @property
    def micro_batches(self) -> int:
        """Micro-batches this worker trains per optimizer step: ``accum`` for each of its shards."""
        return len(self.shards) * self.accum

    def batch(self, step: int, micro: int = 0) -> Any:
        """Micro-batch ``micro`` (0-based, below ``micro_batches``) of optimizer step ``step``
        (1-based): shard by shard, each shard's ``accum`` micro-batches in order."""
        if not self._started:
            self.sampler.start()  # measured from the first batch, not from start-up
            self._started = True
        shard, m = divmod(micro, self.accum)
        b = self.loaders[shard].batch((step - 1) * self.accum + m + 1)
        self.sampler.count(rows(b))
        return b

    def position(self, step: int) -> DataPosition:
        """Where the stream stands after ``step`` optimizer steps."""
        return self.loader.position(step * self.accum)

    def check_restored(self, state: dict[str, Any], step: int) -> None:
        """The checkpoint's data position must be one this loader can continue from."""
        saved = state.get("data")
        if saved is None:
            return  # written before positions were recorded: the step alone is the position
        want = self.position(step)
        check_resumable(saved, want)
        if (int(saved["epoch"]), int(saved["batch_index"])) != (want.epoch, want.batch_index):
            raise DataMismatch(f"the checkpoint's data position {saved} does not match its step {step}")

    # --- telemetry -------------------------------------------------------------------------
    def gather_telemetry(self) -> None:
        """Every rank calls this at the same step; rank 0 keeps everyone's numbers."""
        if not self._started:
            self.sampler.start()
            self._started = True
        mine = self.sampler.snapshot().to_json()
        everyone: list[Any] = [mine]
        if self.world > 1:
            import torch.distributed as dist

            everyone = [None] * self.world
            dist.all_gather_object(everyone, mine)
        if self.rank == 0:
            self.telemetry = summary([w for w in everyone if w is not None])

    def close(self) -> None:
        self.sampler.stop()
        for loader in self.loaders:
            loader.close()


def rows(batch: Any) -> int:
    """Samples in a batch: the leading size of its first tensor (0 when it holds none)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, list | tuple) else ()
    for item in items:
        n = rows(item)
        if n:
            return n
    return 0
