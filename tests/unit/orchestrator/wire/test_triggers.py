"""Fault triggers: which step, which region, how many times; and how they are validated."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.config.compose import compose
from orchestrator.errors import ConfigError
from orchestrator.wire.sections import FaultSpec
from orchestrator.wire.triggers import due_after, due_at_step, due_during, exhausted, in_region, random_steps


def test_random_steps_are_drawn_once_from_the_seed() -> None:
    a = random_steps(7, 0.05, 500)
    assert a == random_steps(7, 0.05, 500)
    assert a != random_steps(8, 0.05, 500)
    assert 10 <= len(a) <= 45 and all(1 <= s <= 500 for s in a)
    assert random_steps(1, 1.0, 5) == {1, 2, 3, 4, 5}


def fault(**plain: Any) -> FaultSpec:
    return FaultSpec.from_plain(plain)


def test_at_step_and_random_faults_are_due_at_their_steps_only() -> None:
    assert due_at_step(fault(kind="kill_region", at_step=60), 60, 500)
    assert not due_at_step(fault(kind="kill_region", at_step=60), 61, 500)
    rnd = fault(kind="kill_worker", random={"seed": 3, "rate": 0.1})
    steps = random_steps(3, 0.1, 500)
    assert all(due_at_step(rnd, s, 500) == (s in steps) for s in range(1, 501))
    assert not due_at_step(fault(kind="preempt", after_s=2.0), 60, 500)


def test_after_s_during_and_repeat() -> None:
    timed = fault(kind="preempt", after_s=2.0)
    assert not due_after(timed, None) and not due_after(timed, 1.9) and due_after(timed, 2.0)
    assert due_during(fault(kind="kill_region", during="restore"), "restore")
    assert not due_during(fault(kind="kill_region", during="restore"), "checkpoint_upload")
    twice = fault(kind="kill_region", at_step=5, repeat=2)
    assert not exhausted(twice, 1) and exhausted(twice, 2)
    assert exhausted(fault(kind="kill_region", at_step=5), 1)


def test_a_fault_aimed_at_a_region_fires_only_there_but_storage_faults_name_the_store() -> None:
    assert in_region(fault(kind="kill_region", region="local-b"), "local-b")
    assert not in_region(fault(kind="kill_region", region="local-b"), "local-a")
    assert in_region(fault(kind="kill_region"), "local-a")
    assert in_region(fault(kind="storage_outage", region="local-b"), "local-a")


def test_new_kinds_and_triggers_compose_from_the_command_line() -> None:
    cfg = compose(
        [
            "chaos.faults=[{kind:preempt,after_s:3,repeat:2,grace_s:10},"
            "{kind:kill_region,random:{seed:4,rate:0.01}},{kind:controller_crash,during:provisioning}]"
        ]
    )
    pre, rnd, crash = cfg.chaos.faults
    assert (pre.kind, pre.after_s, pre.repeat, pre.grace_s) == ("preempt", 3.0, 2, 10.0)
    assert rnd.random is not None and (rnd.random.seed, rnd.random.rate) == (4, 0.01)
    assert crash.during == "provisioning"


@pytest.mark.parametrize(
    ("fault", "key", "says"),
    [
        ("{kind:kill_region}", "chaos.faults[0]", "exactly one trigger"),
        ("{kind:kill_region,at_step:5,after_s:2}", "chaos.faults[0]", "at_step, after_s"),
        ("{kind:kill_region,during:lunch}", "chaos.faults[0].during", "checkpoint_upload"),
        ("{kind:preempt,during:provisioning}", "chaos.faults[0].during", "needs a running attempt"),
        ("{kind:user_error,after_s:3}", "chaos.faults[0]", "raised by the workload"),
        ("{kind:kill_worker,after_s:3}", "chaos.faults[0].after_s", "rendezvous"),
        ("{kind:kill_region,random:{seed:1,rate:0}}", "chaos.faults[0].random.rate", "0 < rate"),
        ("{kind:kill_region,at_step:5,repeat:0}", "chaos.faults[0].repeat", ">= 1"),
        ("{kind:preempt,at_step:5,grace_s:0}", "chaos.faults[0].grace_s", "> 0"),
    ],
)
def test_bad_triggers_are_refused_naming_the_key(fault: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose([f"chaos.faults=[{fault}]"])
    assert err.value.key == key
    assert says in str(err.value)


def test_controller_crash_is_not_combined_with_storage_faults() -> None:
    with pytest.raises(ConfigError, match="proxies live in the controller"):
        compose(
            [
                "cloud=local_cloudstores",
                "chaos.faults=[{kind:controller_crash,at_step:5},{kind:storage_outage,at_step:9}]",
            ]
        )


@pytest.mark.parametrize("drill", ["region_outage", "spot_storm", "double_region_loss", "controller_crash", "soak"])
def test_every_drill_composes(drill: str) -> None:
    assert compose([f"chaos={drill}"]).chaos.faults
