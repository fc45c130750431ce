"""The loss points file (orchestrator/runstate/losses.py): what is not ours is left out of the plot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.runstate.losses import append_loss, read_loss
from orchestrator.runstate.runfiles import DamagedFile

pytestmark = pytest.mark.unit


def test_loss_points_that_are_not_ours_are_left_out_of_the_plot(tmp_path: Path) -> None:
    append_loss(str(tmp_path), generation=1, region="a", step=1, loss=0.5)
    with (tmp_path / "loss.jsonl").open("a") as fh:
        fh.write('[1]\n{"generation": "x", "region": "a", "step": 2, "loss": 1}\n')
    assert [p["step"] for p in read_loss(str(tmp_path))] == [1]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("shape", ["fifo", "link", "folder"])
def test_the_loss_file_is_never_written_through_a_link_nor_waited_on(tmp_path: Path, shape: str) -> None:
    outside = tmp_path / "outside.jsonl"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / "loss.jsonl"
    if shape == "fifo":
        os.mkfifo(path)
    elif shape == "link":
        path.symlink_to(outside)
    else:
        path.mkdir()
    with pytest.raises(DamagedFile, match=r"loss\.jsonl: .*not a regular file"):
        append_loss(str(run_dir), generation=1, region="a", step=1, loss=0.5)
    with pytest.raises(DamagedFile, match=r"loss\.jsonl: .*not a regular file"):
        read_loss(str(run_dir))
    assert not outside.exists()
