"""benchmarks/node_loss.py's pure part: the one recovered incident of a kind, or an exit naming what there was."""

from __future__ import annotations

import pytest

from benchmarks.node_loss import MODES, incident_of

pytestmark = pytest.mark.unit


def test_the_one_recovered_incident_of_the_kind_is_taken() -> None:
    result = {"incidents": [{"kind": "preempted", "rto_s": 1.0}, {"kind": "node_lost", "rto_s": 4.5}]}
    assert incident_of(result, "node_lost") == {"kind": "node_lost", "rto_s": 4.5}


@pytest.mark.parametrize(
    "incidents",
    [
        [],
        [{"kind": "node_lost", "rto_s": None}],
        [{"kind": "node_lost", "rto_s": 1.0}, {"kind": "node_lost", "rto_s": 2}],
    ],
)
def test_none_an_unrecovered_one_or_two_end_the_benchmark_naming_them(incidents: list[dict]) -> None:
    with pytest.raises(SystemExit, match="expected one recovered node_lost incident"):
        incident_of({"incidents": incidents}, "node_lost")


def test_every_mode_injects_a_known_fault() -> None:
    assert {fault for fault, _ in MODES.values()} == {"kill_node", "kill_region"}
