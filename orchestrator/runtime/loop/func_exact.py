"""What makes a train function (job.train_func) exact with no change to it.

- Before the function starts, every rank is seeded (Python, NumPy, torch and CUDA) from
  ``job.seed`` and its rank (``rank_seed``): two runs of the same function draw the same
  numbers, where it does not seed itself.
- With every checkpoint the function reports, each rank's RNG states go into the
  checkpoint beside the function's files, under ``RNG_DIR`` (its own file, put by that
  rank). When the function resumes from that checkpoint, its first
  ``ray.train.get_checkpoint()`` puts them back on every rank: the draws after the
  resume (dropout, a DataLoader's shuffle seed) are those after the report in a run
  that never failed. A rank of a world larger than the saved one takes the state of
  rank ``rank % saved_world`` (as the built-in loop does).
- ``RNG_DIR`` is the orchestrator's: a function's folder that holds it is refused (one
  line), and the folder ``get_checkpoint()`` returns never shows it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping

import numpy as np
import torch

RNG_DIR = ".orchestrator"


def rng_name(rank: int) -> str:
    return f"{RNG_DIR}/rng-rank{rank}.pt"


def is_ours(name: str) -> bool:
    """Whether a checkpoint's file is the orchestrator's (an RNG state), not the function's."""
    return name.split("/", 1)[0] == RNG_DIR


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank ``rank``: 32 bits of sha256("seed:rank"), so that no two (seed, rank)
    pairs share one the way ``seed + rank`` would (seed 1 rank 0 against seed 0 rank 1)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{rank}".encode()).digest()[:4], "big")


def seed_rank(seed: int, rank: int) -> int:
    """Seed Python's, NumPy's and torch's generators (every CUDA device's with torch's) for
    this rank; the seed used."""
    value = rank_seed(seed, rank)
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)
    return value


def saved_ranks(names: Mapping[str, object]) -> int:
    """How many ranks' RNG states a checkpoint holds (the world it was saved at; 0: none)."""
    return sum(1 for name in names if is_ours(name) and name.startswith(f"{RNG_DIR}/rng-rank"))


def rng_for(rank: int, files: Mapping[str, bytes]) -> bytes | None:
    """The RNG state rank ``rank`` restores from a checkpoint's files: its own, or after a
    change of world size rank ``rank % saved_world``'s; None when the checkpoint has none
    (one written before states were saved)."""
    own = files.get(rng_name(rank))
    if own is not None:
        return own
    saved = saved_ranks(files)
    return files.get(rng_name(rank % saved)) if saved else None
