"""The sum-bucket task as a plain Ray Train function (``job.train_func``).

Written the way Ray's documentation writes one, and runnable unchanged under a bare
``TorchTrainer(train_func, train_loop_config=...)``: it builds its own data loader
and model, asks ``ray.train.get_checkpoint()`` where to start, and once per epoch
reports metrics with a checkpoint that rank 0 writes. Under the orchestrator,
``config`` is ``job.params``, ``get_checkpoint()`` returns the newest checkpoint that
verifies (after a failover: one from the region's store or a replica), and each
reported checkpoint is committed to the run's stores.

Exactness is this function's own business, and it takes care of it: the checkpoint
holds the model, the optimizer, the scheduler and the epoch, and each epoch's order
of the data depends on ``(seed, epoch)`` only, so a run resumed from epoch k trains
epochs k+1... exactly as an unbroken run does.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import ray.train
import ray.train.torch
import torch
from ray.train import Checkpoint
from torch import nn
from torch.utils.data import DataLoader

from seqmodels.data import SeqGRU, accuracy_and_loss, train_and_eval

# What config may set; job.params in conf/job/seq_func.yaml sets them all.
DEFAULTS: dict[str, Any] = {
    "epochs": 5,
    "seed": 0,
    "batch_size_per_worker": 32,
    "lr": 0.01,
    "lr_gamma": 0.5,
    "seq_len": 20,
    "vocab": 10,
    "train_size": 8192,
    "eval_size": 1024,
    "data_seed": 1234,
    "embed": 32,
    "hidden": 64,
}
CHECKPOINT_FILE = "checkpoint.pt"


def train_func(config: dict[str, Any]) -> None:
    unknown = set(config) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    c = {**DEFAULTS, **config}
    rank = ray.train.get_context().get_world_rank()
    world = ray.train.get_context().get_world_size()
    torch.manual_seed(c["seed"])

    train_set, held_out = train_and_eval(c["train_size"], c["eval_size"], c["seq_len"], c["vocab"], c["data_seed"])
    # One worker shuffles with this generator, reseeded every epoch; with several,
    # prepare_data_loader swaps in a DistributedSampler, which set_epoch reseeds.
    order = torch.Generator()
    loader = DataLoader(train_set, batch_size=c["batch_size_per_worker"], shuffle=True, generator=order)
    loader = ray.train.torch.prepare_data_loader(loader)

    model = ray.train.torch.prepare_model(SeqGRU(c["vocab"], c["embed"], c["hidden"]))
    plain = model.module if hasattr(model, "module") else model  # DDP wraps it with 2+ workers
    optimizer = torch.optim.Adam(model.parameters(), lr=c["lr"])
    # One scheduler step per epoch: the learning rate halves every epoch by default.
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=c["lr_gamma"])

    start_epoch = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, CHECKPOINT_FILE), map_location="cpu", weights_only=True)
        plain.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start_epoch = int(state["epoch"]) + 1

    device = ray.train.torch.get_device()
    for epoch in range(start_epoch, c["epochs"]):
        order.manual_seed(c["seed"] * 1_000_003 + epoch)
        if world > 1:
            loader.sampler.set_epoch(epoch)
        total, batches = 0.0, 0
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
        scheduler.step()

        metrics = {"epoch": epoch, "loss": total / max(batches, 1), **accuracy_and_loss(plain, held_out)}
        with tempfile.TemporaryDirectory() as tmp:
            saved = None
            if rank == 0:  # the weights are the same on every rank: one copy is enough
                torch.save(
                    {
                        "model": plain.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(),
                        "epoch": epoch,
                    },
                    os.path.join(tmp, CHECKPOINT_FILE),
                )
                saved = Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=saved)
