"""The loss points file (orchestrator/runstate/losses.py): what is not ours is left out of the plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.runstate.losses import append_loss, read_loss

pytestmark = pytest.mark.unit


def test_loss_points_that_are_not_ours_are_left_out_of_the_plot(tmp_path: Path) -> None:
    append_loss(str(tmp_path), generation=1, region="a", step=1, loss=0.5)
    with (tmp_path / "loss.jsonl").open("a") as fh:
        fh.write('[1]\n{"generation": "x", "region": "a", "step": 2, "loss": 1}\n')
    assert [p["step"] for p in read_loss(str(tmp_path))] == [1]
