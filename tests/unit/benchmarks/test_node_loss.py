"""benchmarks/node_loss.py's pure parts: the one recovered incident of a kind (or an exit naming
what there was), the survivors a recovery restarted, and the figures."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import node_loss
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
    assert {fault for fault, _ in MODES.values()} == {"kill_worker", "kill_node", "kill_region"}
    assert {fault for fault, _ in MODES.values()} <= set(node_loss.INCIDENT)


def started(t: float, pids: list[int] | None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "runtime.train_started", "ts": t + 0.1, "time": t, "restored_step": 0}
    if pids is not None:
        event["worker_pids"] = pids
    return event


INCIDENT = {"failed_at": 10.0, "detected_at": 11.0}


def test_a_world_restart_counts_every_survivor_and_a_kept_process_none() -> None:
    world_restart = [started(1.0, [100, 200]), started(12.0, [300, 400])]
    assert node_loss.survivor_restarts(world_restart, INCIDENT, lost=1) == 1
    kept = [started(1.0, [100, 200]), started(12.0, [100, 400])]
    assert node_loss.survivor_restarts(kept, INCIDENT, lost=1) == 0
    # Elastic: the world shrank to the survivor, restarted.
    assert node_loss.survivor_restarts([started(1.0, [100, 200]), started(12.0, [500])], INCIDENT, lost=1) == 1
    # The last world before the fault and the first after it are the ones compared.
    later = [started(0.5, [1, 2]), started(1.0, [100, 200]), started(12.0, [100, 400]), started(30.0, [7, 8])]
    assert node_loss.survivor_restarts(later, INCIDENT, lost=1) == 0


@pytest.mark.parametrize(
    ("journal", "said"),
    [
        ([started(1.0, None), started(12.0, [1, 2])], "without worker_pids"),
        ([started(12.0, [1, 2])], "no world before or after"),
        ([started(1.0, [1, 2])], "no world before or after"),
    ],
)
def test_a_journal_without_both_worlds_ends_the_benchmark_naming_why(journal: list[dict], said: str) -> None:
    with pytest.raises(SystemExit, match=said):
        node_loss.survivor_restarts(journal, INCIDENT, lost=1)


def row(rto: float, survivors: int | None, weights: str = "w") -> dict[str, Any]:
    return {
        "rto_s": rto,
        "detected_after_s": 1.0,
        "lost_steps": 0,
        "replace_s": None,
        "world_after": 2,
        "weights": weights,
        "survivor_restarts": survivors,
    }


def test_the_figures_give_each_modes_rto_its_ratio_to_the_cold_failover_and_the_survivors() -> None:
    rows = {
        "kill_worker": row(2.0, 1),
        "replaced": row(5.0, 0),
        "standby": row(1.0, 0),
        "elastic": row(4.0, 1, weights="other"),
        "cold failover": row(10.0, None),
    }
    fig = node_loss.figures(rows)
    assert (fig["rto_kill_worker_s"], fig["rto_cold_failover_s"], fig["rto_cold_s"]) == (2.0, 10.0, 10.0)
    assert (fig["kill_worker_ratio"], fig["node_replaced_ratio"], fig["node_elastic_ratio"]) == (0.2, 0.5, 0.4)
    assert fig["survivor_restarts"] == 1 and fig["survivor_restarts_replaced"] == 0
    assert (fig["rto_node_standby_s"], fig["node_standby_ratio"], fig["survivor_restarts_standby"]) == (1.0, 0.1, 0)
    assert fig["replaced_weights_exact"] and fig["kill_worker_weights_exact"] and fig["standby_weights_exact"]
    assert "elastic_weights_exact" not in fig, "a smaller world is not the same run"
    assert "survivors restarted" in node_loss.table(rows)
    rows["kill_worker"]["survivor_restarts"] = None
    assert node_loss.figures(rows)["survivor_restarts"] is None


def test_the_figures_of_some_modes_say_only_theirs_beside_the_cold_failover() -> None:
    fig = node_loss.figures({"kill_worker": row(2.5, 0), "cold failover": row(10.0, None)})
    assert (fig["rto_kill_worker_s"], fig["kill_worker_ratio"], fig["survivor_restarts"]) == (2.5, 0.25, 0)
    assert fig["kill_worker_weights_exact"] and "node_replaced_ratio" not in fig and "node_replace_s" not in fig


def test_the_modes_asked_come_in_order_with_the_cold_failover_last_and_an_unknown_one_is_named() -> None:
    assert node_loss.chosen_modes("elastic, kill_worker") == ["kill_worker", "elastic", "cold failover"]
    with pytest.raises(SystemExit, match="unknown kill_wroker"):
        node_loss.chosen_modes("kill_wroker")
