"""When a hedge starts and when it is taken back (recovery/hedge.py), look by look."""

from __future__ import annotations

import pytest

from recovery.detection import Health, Observation
from recovery.hedge import HedgeAction, HedgeRule, HedgeView, answered, hedge_action, hedge_after_s, trouble

pytestmark = pytest.mark.unit

RULE = HedgeRule(after_s=2.5, max_launches=2)


def look(age: float | None, exit_code: int | None = None, health: Health = Health.UP) -> Observation:
    return Observation(runtime_exit=exit_code, health=health, heartbeat_age_s=age, running_for_s=60.0)


def test_the_default_sign_is_two_and_a_half_heartbeats_never_past_half_the_lease() -> None:
    assert hedge_after_s(0, 1.0, 10.0) == 2.5
    assert hedge_after_s(0, 3.0, 10.0) == 5.0  # half the lease: the loss comes at its end
    assert hedge_after_s(4.0, 1.0, 10.0) == 4.0  # the user's, as given


def test_a_missed_heartbeat_or_a_notice_is_a_sign_a_glitch_with_fresh_heartbeats_is_not() -> None:
    assert trouble(look(0.4), False, RULE) is None
    assert trouble(look(0.4, health=Health.NOT_UP), False, RULE) is None
    assert trouble(look(None), False, RULE) is None  # still starting: its own grace
    assert trouble(look(3.1), False, RULE) == "no heartbeat for 3.1 s"
    assert trouble(look(0.4), True, RULE) == "a preemption notice"
    assert trouble(look(9.0, exit_code=5), False, RULE) is None  # ended: the verdict decides


def test_the_region_answers_again_only_with_a_fresh_heartbeat_and_no_notice() -> None:
    assert answered(look(0.3), False, RULE)
    assert not answered(look(3.0), False, RULE)
    assert not answered(look(None), False, RULE)
    assert not answered(look(0.3), True, RULE)  # a notice is never taken back
    assert not answered(look(0.3, exit_code=0), False, RULE)


def test_a_partition_that_heals_starts_one_hedge_then_cancels_it() -> None:
    out, launches, actions = False, 0, []
    for age in (0.2, 1.4, 2.6, 3.6, 4.6, 0.3, 0.2):
        obs = look(age)
        action = hedge_action(HedgeView(out, launches), trouble(obs, False, RULE), answered(obs, False, RULE), RULE)
        actions.append(action)
        if action is HedgeAction.START:
            out, launches = True, launches + 1
        elif action is HedgeAction.CANCEL:
            out = False
    assert actions == [None, None, HedgeAction.START, None, None, HedgeAction.CANCEL, None]
    assert launches == 1


def test_the_budget_bounds_the_launches() -> None:
    spent = HedgeView(out=False, launches=2)
    sign = trouble(look(5.0), False, RULE)
    assert hedge_action(spent, sign, False, RULE) is None
    assert hedge_action(HedgeView(False, 1), sign, False, RULE) is HedgeAction.START
    assert hedge_action(HedgeView(False, 0), sign, False, HedgeRule(2.5, 0)) is None
    assert hedge_action(HedgeView(True, 1), None, False, RULE) is None  # out, and no answer yet
