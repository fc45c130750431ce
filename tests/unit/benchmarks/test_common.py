"""The benchmarks' ``--json PATH``: each script's parser takes it, and the pure functions
that turn a run's records into figures give the flat keys the README's tables read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import data_loading, gpu_check, recovery, storage
from benchmarks.common import write_json

SCRIPTS = [recovery, storage, data_loading, gpu_check]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__.split(".")[-1])
def test_every_script_takes_json_and_keeps_its_defaults(script: Any) -> None:
    assert script.parse_args([]).json is None
    assert script.parse_args(["--json", "out.json"]).json == "out.json"
    with pytest.raises(SystemExit) as info:
        script.parse_args(["--help"])
    assert info.value.code == 0


def test_recovery_and_storage_take_a_job_digits_by_default() -> None:
    for script in (recovery, storage):
        assert script.parse_args([]).job == "digits"
        assert script.parse_args(["--job", "gpt_large"]).job == "gpt_large"
    args = recovery.parse_args([])
    assert (args.steps, args.kill_at, args.interval_steps) == (10000, 6000, None)
    args = storage.parse_args([])
    assert (args.mb, args.steps, args.interval, args.interval_high) == (48, 3000, 500, 50)
    assert args.modes == list(storage.MODES)
    assert storage.parse_args(["--modes", "none,async"]).modes == ["none", "async"]
    with pytest.raises(SystemExit) as info:
        storage.parse_args(["--modes", "none,fast"])
    assert info.value.code == 2


def written(tmp_path: Path, figures: dict[str, Any]) -> dict[str, Any]:
    """Through write_json, which refuses anything but flat JSON values under plain keys."""
    path = tmp_path / "figures.json"
    write_json(str(path), figures)
    out = json.loads(path.read_text())
    assert out.pop("date")
    return out
