"""A run's goodput, one category at a time, on a journal whose every moment is known: two
attempts, a lost cluster, a provisioning retry, a restore and steps trained twice."""

from __future__ import annotations

import random
from typing import Any

import pytest

from orchestrator.runstate.events import (
    AttemptEnded,
    AttemptStarted,
    Event,
    FailureDetected,
    FencesRead,
    PoolShare,
    PoolTaken,
    Provisioned,
    ProvisionFailed,
    ProvisionRetry,
    RunFinished,
    RunResumed,
    RunStarted,
    RuntimeReport,
    StandbyActivated,
    Teardown,
)
from orchestrator.runstate.goodput import CATEGORIES, goodput_of, journal_goodput
from providers.prices import NodePrice

pytestmark = pytest.mark.unit


def rt(t: float, kind: str, gen: int, **fields: Any) -> RuntimeReport:
    return RuntimeReport(ts=t + 0.5, kind=kind, fields={"time": t, "generation": gen, "by": "runtime", **fields})


def two_attempts() -> list[Event]:
    """0 start; 1-11 provisioning; 11-31 start-up; 31-130 training (stall 2 s), lost at
    130, seen at 133; 133-140 the controller's; 140-150 a provisioning try refused, 150-160
    provisioning; 160-170 start-up, 170-175 restoring step 100; 175-275 training steps
    100-300 (stall 1 s; steps 100-150 again); the end at 278."""
    return [
        RunStarted(ts=0.0, run_id="r", config={}),
        FencesRead(ts=0.1, generation_floor=0),
        AttemptStarted(ts=1.0, generation=1, region="local-a"),
        Provisioned(ts=11.0, region="local-a", cluster="c1", provision_s=10.0, generation=1),
        rt(31.0, "train_started", 1, restored_step=0, restore_s=None),
        rt(80.0, "checkpoint_committed", 1, step=100, stall_s=2.0),
        FailureDetected(ts=133.0, kind="cluster_lost", region="local-a", detected_after_s=3.0, last_step=150),
        AttemptEnded(ts=134.0, generation=1, region="local-a", last_step=150),
        Teardown(ts=135.0, cluster="c1"),
        AttemptStarted(ts=140.0, generation=2, region="local-b"),
        ProvisionRetry(ts=150.0, region="local-b", error="no capacity", retry=1),
        Provisioned(ts=160.0, region="local-b", cluster="c2", provision_s=10.0, generation=2),
        rt(175.0, "train_started", 2, restored_step=100, restore_s=5.0),
        rt(220.0, "checkpoint_committed", 2, step=200, stall_s=1.0),
        AttemptEnded(ts=275.0, generation=2, region="local-b", last_step=300),
        Teardown(ts=276.0, cluster="c2"),
        RunFinished(ts=277.0, status="SUCCEEDED", final_step=300),
    ]


def seconds(events: list[Event], now: float | None = 278.0, **kw: Any) -> dict[str, float]:
    g = goodput_of(events, kw.get("prices", {}), kw.get("nodes", {}), now)
    return dict(g.seconds)


def test_the_categories_partition_the_wall_time_and_goodput_is_productive_over_it() -> None:
    g = goodput_of(two_attempts(), {}, {}, 278.0)
    assert g.wall_s == 278.0
    assert sum(g.seconds.values()) == pytest.approx(278.0, abs=1e-9)
    assert set(g.seconds) == set(CATEGORIES)
    # 99 s and 100 s of training, less 3 s of stalls and 50 steps' 24.75 s trained again.
    assert g.seconds["productive"] == pytest.approx(97.0 + 74.25)
    assert g.goodput == pytest.approx((97.0 + 74.25) / 278.0)


def test_provisioning_is_from_the_ask_to_the_cluster_up() -> None:
    assert seconds(two_attempts())["provisioning"] == pytest.approx(10.0 + 10.0)


def test_waiting_for_capacity_is_the_provisioning_the_provider_refused_and_a_world_too_small() -> None:
    assert seconds(two_attempts())["waiting_for_capacity"] == pytest.approx(10.0)
    events = two_attempts()
    # Attempt 2's workers wait 4 s for nodes enough before they train (restore counted after).
    events.insert(12, rt(166.0, "world_waiting", 2, reason="1 of 2 fit"))
    s = seconds(events)
    assert s["waiting_for_capacity"] == pytest.approx(10.0 + 4.0) and s["startup"] == pytest.approx(20.0 + 6.0)


def test_a_region_given_up_for_capacity_is_waiting_and_the_moving_on_the_controllers() -> None:
    events = two_attempts()[:10]
    events += [
        ProvisionFailed(ts=150.0, region="local-b", kind="no_capacity", purpose="attempt", generation=2),
        RunFinished(ts=152.0, status="FAILED"),
    ]
    s = seconds(events, now=152.0)
    assert s["waiting_for_capacity"] == pytest.approx(10.0)
    assert s["orchestration"] == pytest.approx(1.0 + 7.0 + 2.0)


def test_startup_is_from_the_cluster_up_to_the_workers_ready() -> None:
    assert seconds(two_attempts())["startup"] == pytest.approx(20.0 + 10.0)


def test_restore_is_the_restore_s_the_runtime_reported_before_it_trained() -> None:
    assert seconds(two_attempts())["restore"] == pytest.approx(5.0)


def test_retrained_is_the_steps_trained_twice_at_the_step_time_of_the_attempt_that_did() -> None:
    g = goodput_of(two_attempts(), {}, {}, 278.0)
    # Attempt 1 reached step 150; attempt 2 restored step 100: 50 steps again, at (100 - 1) / 200 s each.
    assert g.retrained_steps == 50
    assert g.seconds["retrained"] == pytest.approx(50 * 99.0 / 200)


def test_a_restore_past_every_step_seen_trains_nothing_twice() -> None:
    events = two_attempts()
    events[12] = rt(175.0, "train_started", 2, restored_step=160, restore_s=5.0)
    g = goodput_of(events, {}, {}, 278.0)
    assert g.retrained_steps == 0 and g.seconds["retrained"] == 0.0


def test_checkpoint_stall_is_the_sum_each_commit_reported() -> None:
    assert seconds(two_attempts())["checkpoint_stall"] == pytest.approx(3.0)


def test_failure_detection_is_from_the_failure_to_its_sight() -> None:
    assert seconds(two_attempts())["failure_detection"] == pytest.approx(3.0)


def test_orchestration_is_the_controllers_own_time_between_the_rest() -> None:
    # 0-1 (fences), 133-140 (decision, teardown), 275-278 (teardown, result).
    assert seconds(two_attempts())["orchestration"] == pytest.approx(1.0 + 7.0 + 3.0)


def test_the_time_no_controller_ran_is_not_the_runs() -> None:
    events = two_attempts()[:8]  # interrupted after attempt 1 ended, at 134
    events += [
        RunResumed(ts=1000.0, pid=2),
        AttemptStarted(ts=1001.0, generation=2, region="local-b"),
        Provisioned(ts=1011.0, region="local-b", cluster="c2", provision_s=10.0, generation=2),
        RunFinished(ts=1012.0, status="INTERRUPTED"),
    ]
    g = goodput_of(events, {}, {}, 1012.0)
    assert g.wall_s == pytest.approx(134.0 + 12.0)
    assert sum(g.seconds.values()) == pytest.approx(g.wall_s)


def test_node_hours_run_from_launch_to_teardown_times_nodes_and_cost_by_price() -> None:
    prices = {"local-a": NodePrice(3.0, "test"), "local-b": NodePrice(1.0, "test")}
    g = goodput_of(two_attempts(), prices, {"local-a": 2, "local-b": 1}, 278.0)
    assert g.node_hours["local-a"] == pytest.approx(2 * (135.0 - 1.0) / 3600)
    assert g.node_hours["local-b"] == pytest.approx((276.0 - 150.0) / 3600)
    assert g.cost_usd == pytest.approx(3.0 * 2 * 134.0 / 3600 + 126.0 / 3600)
    d = g.as_dict()
    assert d["cost_usd"]["by_region"]["local-a"] == pytest.approx(3.0 * 2 * 134.0 / 3600, abs=1e-6)
    assert d["unpriced"] == []


def test_a_region_without_a_price_leaves_the_total_unknown_and_says_which() -> None:
    g = goodput_of(two_attempts(), {"local-a": NodePrice(3.0, "test")}, {}, 278.0)
    assert g.cost_usd is None and g.unpriced == ("local-b",)


def test_a_standbys_hours_until_it_is_taken_are_idle_beside_the_run() -> None:
    events = two_attempts()[:9]
    events.insert(4, Provisioned(ts=20.0, region="local-b", cluster="s1", provision_s=5.0, purpose="standby"))
    events += [
        AttemptStarted(ts=136.0, generation=2, region="local-b", standby=True),
        StandbyActivated(ts=137.0, region="local-b", generation=2, cluster="s1"),
        rt(140.0, "train_started", 2, restored_step=100, restore_s=1.0),
        AttemptEnded(ts=240.0, generation=2, region="local-b", last_step=300),
        Teardown(ts=241.0, cluster="s1"),
        RunFinished(ts=242.0, status="SUCCEEDED", final_step=300),
    ]
    prices = {"local-b": NodePrice(2.0, "test")}
    g = goodput_of(events, prices, {}, 242.0)
    assert g.standby_idle_node_hours["local-b"] == pytest.approx((137.0 - 15.0) / 3600)
    assert g.node_hours["local-b"] == pytest.approx((241.0 - 137.0) / 3600)
    assert g.seconds["provisioning"] == pytest.approx(10.0)  # attempt 2 provisioned nothing
    assert g.as_dict()["cost_usd"]["standby_idle"] == pytest.approx(2.0 * 122.0 / 3600, abs=1e-6)


def test_a_pool_standby_costs_the_run_its_share_and_once_taken_is_the_run_s_own() -> None:
    events = two_attempts()[:9]
    # Launched by this run for the pool: no hours of the run's by itself (its share says).
    events.insert(4, Provisioned(ts=20.0, region="local-b", cluster="p1", provision_s=5.0, purpose="pool"))
    events += [
        PoolShare(ts=136.0, pool="team", region="local-b", share_s=70.0, cluster="p1", from_ts=15.0, to_ts=136.0),
        PoolTaken(ts=136.0, pool="team", region="local-b", cluster="p1", generation=2),
        AttemptStarted(ts=136.0, generation=2, region="local-b", standby=True),
        Provisioned(
            ts=137.0, region="local-b", cluster="p1", provision_s=0.0, purpose="attempt", generation=2, pool="team"
        ),
        rt(150.0, "train_started", 2, restored_step=100, restore_s=1.0),
        AttemptEnded(ts=240.0, generation=2, region="local-b", last_step=300),
        Teardown(ts=241.0, cluster="p1"),
        RunFinished(ts=242.0, status="SUCCEEDED", final_step=300),
    ]
    g = goodput_of(events, {"local-b": NodePrice(2.0, "test")}, {"local-b": 2}, 242.0)
    assert g.standby_idle_node_hours["local-b"] == pytest.approx(70.0 * 2 / 3600)
    assert g.node_hours["local-b"] == pytest.approx((241.0 - 137.0) * 2 / 3600)
    assert g.seconds["provisioning"] == pytest.approx(10.0)  # attempt 2 provisioned nothing
    assert g.seconds["startup"] == pytest.approx(20.0 + 13.0) and g.seconds["restore"] == pytest.approx(1.0)
    assert sum(g.seconds.values()) == pytest.approx(g.wall_s)


@pytest.mark.parametrize("bad", ["soon", float("nan"), -5.0, 1e300, True, None])
def test_a_runtime_time_that_is_no_time_moves_nothing_and_the_sum_holds(bad: Any) -> None:
    events = two_attempts()
    events[4] = RuntimeReport(
        ts=31.5, kind="train_started", fields={"time": bad, "generation": 1, "restored_step": "x", "restore_s": bad}
    )
    g = goodput_of(events, {}, {}, 278.0)
    assert sum(g.seconds.values()) == pytest.approx(278.0)
    assert all(v >= 0 for v in g.seconds.values())


def test_an_older_attempts_late_report_does_not_move_the_phase_of_the_current() -> None:
    events = two_attempts()
    events.insert(13, rt(200.0, "train_started", 1, restored_step=0))
    assert seconds(events) == seconds(two_attempts())


def test_any_journal_order_partitions_its_wall_time() -> None:
    rng = random.Random(7)
    base = two_attempts()
    for _ in range(300):
        events = [base[0], *rng.sample(base[1:], k=rng.randint(0, len(base) - 1))]
        g = goodput_of(events, {}, {}, rng.choice([None, 300.0]))
        assert sum(g.seconds.values()) == pytest.approx(g.wall_s, abs=1e-6)
        assert all(v >= -1e-9 for v in g.seconds.values()), g.seconds


def test_the_journals_own_config_prices_and_sizes_the_run() -> None:
    config = {"cloud": {"regions": {"local-a": {"hourly_cost": 3.0, "nodes": 2}, "local-b": {"hourly_cost": 1.0}}}}
    events = two_attempts()
    events[0] = RunStarted(ts=0.0, run_id="r", config=config)
    g = journal_goodput(events, now=278.0)
    assert g.cost_usd == pytest.approx(3.0 * 2 * 134.0 / 3600 + 126.0 / 3600)
    assert g.as_dict()["prices"]["local-a"] == {"usd_per_node_hour": 3.0, "source": "cloud.regions.local-a.hourly_cost"}
