"""benchmarks/sharded.py with its smallest useful settings: job=gpt, a checkpoint every
two steps, a worker killed after the second."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.bench]


def test_sharded_runs(tmp_path: Path) -> None:
    run = run_benchmark("sharded", tmp_path, "--jobs", "gpt", "--steps", "6", "--interval", "2", "--kill-at", "5")
    assert run.returncode == 0, run.said()
    f = run.figures
    assert f is not None
    for key in (
        "fsdp_state_bytes_per_rank_ratio",
        "ckpt_stall_ratio_fsdp_vs_ddp",
        "ckpt_commit_ratio_fsdp_vs_ddp",
        "restore_ratio_sharded",
        "steps_ratio_fsdp_vs_ddp",
    ):
        assert isinstance(f[key], float) and f[key] > 0, (key, f)
        assert f[f"gpt_{key}"] == f[key]
    # Two ranks each hold half of every sharded tensor (and rank 0 nothing else of size).
    assert 0.4 < f["fsdp_state_bytes_per_rank_ratio"] < 0.6, f
    assert f["gpt_fsdp_restored_step"] == f["gpt_ddp_restored_step"] == 4, f
