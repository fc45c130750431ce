"""A trial's id, inputs and checkpoint folder."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.runtime.search.snapshot import CHECKPOINT_FILES
from orchestrator.runtime.search.trial import INDEX, read_trial_checkpoint, trial_id_of, trial_inputs

pytestmark = pytest.mark.unit


def test_a_trials_id_is_its_index_in_the_search() -> None:
    assert trial_id_of(SimpleNamespace(config={INDEX: 3})) == "trial_00003"
    assert trial_id_of(SimpleNamespace(config={INDEX: "12"})) == "trial_00012"


def test_a_checkpoint_folder_is_read_file_by_file(tmp_path: Path) -> None:
    for name in CHECKPOINT_FILES:
        (tmp_path / name).write_bytes(name.encode())
    (tmp_path / "extra.json").write_text("{}")  # Tune's own: not part of a trial's checkpoint
    assert read_trial_checkpoint(str(tmp_path)) == {n: n.encode() for n in CHECKPOINT_FILES}
    (tmp_path / "state.pt").unlink()
    with pytest.raises(FileNotFoundError):
        read_trial_checkpoint(str(tmp_path))


def test_every_trial_gets_the_job_the_data_the_values_and_the_control_channel() -> None:
    spec = SimpleNamespace(job="J", data="D", control_url="file:///c", control_options={"k": 1}, generation=4)
    got = trial_inputs(spec, "H", [{"lr": 0.1}])  # type: ignore[arg-type]
    assert got == {
        "hpo": "H",
        "job": "J",
        "data": "D",
        "configs": [{"lr": 0.1}],
        "control_url": "file:///c",
        "control_options": {"k": 1},
        "generation": 4,
    }
