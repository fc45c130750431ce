"""benchmarks/sharded.py's pure parts: the journal's commit times and restore window, the ratios."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.common import write_json
from benchmarks.sharded import (
    LAYER_BYTES,
    arm_figures,
    commit_times,
    figures_of,
    layers_for,
    parse_args,
    phase_line,
    ratio,
    restore_phases,
    restore_window,
    stall_times,
    verdict,
)

pytestmark = pytest.mark.unit


def test_commit_times_are_the_runtimes_own() -> None:
    journal = [
        {"type": "runtime.checkpoint_committed", "commit_s": 1.5, "bytes": 10},
        {"type": "runtime.replicated", "copy_s": 9.0},
        {"type": "runtime.checkpoint_committed", "commit_s": 0.5, "bytes": 10},
    ]
    assert commit_times(journal) == [1.5, 0.5]


def test_the_stalls_are_every_groups_but_the_final_steps() -> None:
    journal = [
        {"type": "runtime.checkpoint_committed", "step": 2, "stall_s": 0.5},
        {"type": "runtime.checkpoint_committed", "step": 4, "stall_s": 0.7},
        {"type": "runtime.train_started", "restored_step": 4},  # a new group: the result's stalls start again
        {"type": "runtime.checkpoint_committed", "step": 6, "stall_s": 2.0},  # with fsdp's final weights digest
        {"type": "runtime.checkpoint_committed", "step": 8},  # one from before commits carried their stall
    ]
    assert stall_times(journal, final_step=6) == [0.5, 0.7]


def test_the_restore_is_the_first_one_the_runtime_timed() -> None:
    journal = [
        {"type": "runtime.train_started", "restored_step": 0, "restored_from": None, "restore_s": None},
        {"type": "runtime.train_started", "restored_step": 4, "restored_from": "file:///s/step-4-g1", "restore_s": 4.5},
    ]
    assert restore_window(journal) == (4.5, 4, "file:///s/step-4-g1")
    assert restore_window(journal[:1]) is None  # a fresh start restores nothing


def test_ratios_are_fsdp_over_ddp_and_none_without_both() -> None:
    ddp = {"state_bytes": 1000, "stall_s": 0.2, "commit_s": 2.0, "steps_per_s": 1.0, "restore_s": 1.0, "raw_s": 1.0}
    fsdp = {"state_bytes": 500, "stall_s": 0.1, "commit_s": 1.0, "steps_per_s": 0.9, "restore_s": 3.0, "raw_s": 2.0}
    assert figures_of(ddp, fsdp) == {
        "fsdp_state_bytes_per_rank_ratio": 0.5,
        "ckpt_stall_ratio_fsdp_vs_ddp": 0.5,
        "ckpt_commit_ratio_fsdp_vs_ddp": 0.5,
        "restore_ratio_sharded": 1.5,
        "restore_ratio_ddp": 1.0,
        "steps_ratio_fsdp_vs_ddp": 0.9,
    }
    assert ratio(None, 1.0) is None and ratio(1.0, 0.0) is None
    assert verdict("restore_ratio_sharded", 1.5) == "goal <= 1.2: NOT met"
    assert verdict("fsdp_state_bytes_per_rank_ratio", 0.5) == "goal <= 0.6: met"
    assert verdict("steps_ratio_fsdp_vs_ddp", 0.9) == ""
    assert parse_args(["--jobs", "gpt", "--json", "x.json"]).jobs == "gpt"
    assert parse_args([]).store == "file" and parse_args(["--store", "s3"]).store == "s3"


def test_the_restores_phases_are_rank_0s_known_ones_and_read_as_one_line() -> None:
    phases = {
        "choose_s": 0.1,
        "read_s": 2.0,
        "verify_s": 1.5,
        "deserialize_s": 0.5,
        "copy_in_s": 0.25,
        "handover_s": 0.125,
        "x": "y",
    }
    journal = [
        {"type": "runtime.train_started", "restored_step": 0, "restore_s": None},
        {"type": "runtime.train_started", "restored_step": 4, "restore_s": 3.0, "restore_phases": phases},
    ]
    got = restore_phases(journal)
    assert list(got) == ["choose_s", "read_s", "verify_s", "deserialize_s", "copy_in_s", "handover_s"]
    assert restore_phases(journal[:1]) == {}
    line = phase_line({"restore_phases": got, "raw_s": 0.4})
    assert line == (
        "choose 0.10 s, read 2.00 s, verify 1.50 s, deserialize 0.50 s, copy in 0.25 s, handover 0.12 s;"
        " raw download 0.40 s"
    )
    assert phase_line({}) == "no restore timed"


def test_size_picks_gpt_xls_layers_for_a_checkpoint_of_about_that_many_bytes() -> None:
    # gpt_xl's own 8 layers make its 1.22 GB (1.14 GiB).
    assert layers_for("1.14G") == 8 and layers_for("1220000000") == 8
    assert layers_for("3G") == round(3 * 2**30 / LAYER_BYTES) and layers_for("1k") == 1
    with pytest.raises(SystemExit, match="--size 'lots': expected a size such as 3G"):
        layers_for("lots")
    assert parse_args(["--size", "3G"]).size == "3G"


def test_an_arms_figures_are_flat_json_its_phases_keys_of_their_own(tmp_path: Any) -> None:
    arm = {"restore_s": 1.5, "raw_s": 0.2, "restore_phases": {"read_s": 0.5, "copy_in_s": 0.4}}
    got = arm_figures("gpt_large", "fsdp", arm)
    assert got == {
        "gpt_large_fsdp_restore_s": 1.5,
        "gpt_large_fsdp_raw_s": 0.2,
        "gpt_large_fsdp_restore_read_s": 0.5,
        "gpt_large_fsdp_restore_copy_in_s": 0.4,
    }
    write_json(str(tmp_path / "out.json"), got)  # a nested dict would be refused
    assert (tmp_path / "out.json").exists()
