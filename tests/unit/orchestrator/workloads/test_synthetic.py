"""The synthetic data set (orchestrator/workloads/synthetic.py): generated deterministically, read by rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from orchestrator.workloads.data import sharded_indices
from orchestrator.workloads.synthetic import Synthetic, ensure_dataset

pytestmark = pytest.mark.unit


def test_synthetic_data_set_is_generated_deterministically_and_read_by_rows(tmp_path: Path) -> None:
    a = ensure_dataset(str(tmp_path / "a"), seed=0, samples=25_000, features=8)
    b = ensure_dataset(str(tmp_path / "b"), seed=0, samples=25_000, features=8)
    assert len(a) == 3
    assert all(Path(p).read_bytes() == Path(q).read_bytes() for p, q in zip(a, b, strict=True))
    job = {"seed": 0, "batch_size": 16, "lr": 0.05, "hidden_size": 8, "eval_fraction": 0.3}
    w = Synthetic(job, {"samples": 25_000, "features": 8, "cache_dir": str(tmp_path / "a")})
    assert w.train_size() == 20_000 and w.train_files() == a[:2]  # the last part is held out
    x, y = w.batch(7, 1, 2)
    rows = np.concatenate([np.load(p) for p in a[:2]])[sharded_indices(20_000, 0, 16, 7, 1, 2).numpy()]
    assert np.array_equal(x.numpy(), rows[:, :-1]) and np.array_equal(y.numpy(), rows[:, -1].astype(np.int64))
    assert set(np.unique(rows[:, -1])) <= set(range(10))
