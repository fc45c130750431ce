"""benchmarks/sharded.py's pure parts: the journal's commit times and restore window, the ratios."""

from __future__ import annotations

import pytest

from benchmarks.sharded import commit_times, figures_of, parse_args, ratio, restore_window, verdict

pytestmark = pytest.mark.unit


def test_commit_times_are_the_runtimes_own() -> None:
    journal = [
        {"type": "runtime.checkpoint_committed", "commit_s": 1.5, "bytes": 10},
        {"type": "runtime.replicated", "copy_s": 9.0},
        {"type": "runtime.checkpoint_committed", "commit_s": 0.5, "bytes": 10},
    ]
    assert commit_times(journal) == [1.5, 0.5]


def test_the_restore_is_the_first_one_the_runtime_timed() -> None:
    journal = [
        {"type": "runtime.train_started", "restored_step": 0, "restored_from": None, "restore_s": None},
        {"type": "runtime.train_started", "restored_step": 4, "restored_from": "file:///s/step-4-g1", "restore_s": 4.5},
    ]
    assert restore_window(journal) == (4.5, 4, "file:///s/step-4-g1")
    assert restore_window(journal[:1]) is None  # a fresh start restores nothing


def test_ratios_are_fsdp_over_ddp_and_none_without_both() -> None:
    ddp = {"state_bytes": 1000, "stall_s": 0.2, "commit_s": 2.0, "steps_per_s": 1.0}
    fsdp = {"state_bytes": 500, "stall_s": 0.1, "commit_s": 1.0, "steps_per_s": 0.9, "restore_s": 3.0, "raw_s": 2.0}
    assert figures_of(ddp, fsdp) == {
        "fsdp_state_bytes_per_rank_ratio": 0.5,
        "ckpt_stall_ratio_fsdp_vs_ddp": 0.5,
        "ckpt_commit_ratio_fsdp_vs_ddp": 0.5,
        "restore_ratio_sharded": 1.5,
        "steps_ratio_fsdp_vs_ddp": 0.9,
    }
    assert ratio(None, 1.0) is None and ratio(1.0, 0.0) is None
    assert verdict("restore_ratio_sharded", 1.5) == "goal <= 1.2: NOT met"
    assert verdict("fsdp_state_bytes_per_rank_ratio", 0.5) == "goal <= 0.6: met"
    assert verdict("steps_ratio_fsdp_vs_ddp", 0.9) == ""
    assert parse_args(["--jobs", "gpt", "--json", "x.json"]).jobs == "gpt"
