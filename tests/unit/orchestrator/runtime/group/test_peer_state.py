"""What a rank holds of its newest checkpoints."""

from __future__ import annotations

import pytest

from orchestrator.runtime.group.peer_state import HeldSnapshots

pytestmark = pytest.mark.unit


def test_the_newest_two_steps_are_held_and_older_ones_dropped() -> None:
    held = HeldSnapshots()
    for step in (50, 100, 150):
        held.hold(step, {"model.pt": bytes([step % 256]) * 4})
    assert held.steps() == [100, 150]
    assert held.at(50) == {}
    assert held.at(150) == {"model.pt": bytes([150]) * 4}


def test_holding_copies_the_mapping_not_the_callers_later_changes() -> None:
    held, files = HeldSnapshots(), {"model.pt": b"abcd"}
    held.hold(1, files)
    files["model.pt"] = b"zzzz"
    assert held.at(1)["model.pt"] == b"abcd"


def test_corruption_flips_one_byte_of_the_model_in_every_step_held() -> None:
    held = HeldSnapshots()
    held.hold(1, {"model.pt": b"\x00" * 8, "state.pt": b"s"})
    held.hold(2, {"state.pt": b"s"})
    assert held.corrupt() == [1]
    assert held.at(1)["model.pt"] != b"\x00" * 8 and len(held.at(1)["model.pt"]) == 8
    assert held.at(1)["state.pt"] == b"s"
