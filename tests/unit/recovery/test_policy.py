"""The failure policy, driven decision by decision the way a run drives it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from recovery.detection import Failure, FailureKind, user_error_signature
from recovery.policy import (
    Action,
    Budgets,
    Decision,
    FailurePolicy,
    History,
    decide,
    next_region,
    passed_over,
    repeats_user_error,
)

K = FailureKind
CANDIDATES = ["a", "b", "c"]
COOLDOWN = 600.0


def policy(max_failovers: int = 2, max_restarts_on_errors: int = 1) -> FailurePolicy:
    return FailurePolicy(CANDIDATES, Budgets(max_failovers, max_restarts_on_errors, COOLDOWN))


def step(p: FailurePolicy, history: History, kind: FailureKind, region: str, now: float) -> tuple[Decision, History]:
    failure = Failure(kind, region, "detail")
    decision = p.make_decision(failure, history, now)
    return decision, history.after(failure, decision, now)


def test_cluster_losses_fail_over_in_order_until_max_failovers_is_spent() -> None:
    p, h = policy(max_failovers=2), History()
    d, h = step(p, h, K.CLUSTER_LOST, "a", now=0.0)
    assert (d.action, d.region) == (Action.FAILOVER, "b")
    d, h = step(p, h, K.CLUSTER_LOST, "b", now=10.0)
    assert (d.action, d.region) == (Action.FAILOVER, "c")
    assert h.failovers == 2
    d, h = step(p, h, K.CLUSTER_LOST, "c", now=20.0)
    assert (d.action, d.region) == (Action.GIVE_UP, None)
    assert "recovery.max_failovers" in d.reason
    assert h.failovers == 2


def test_user_errors_restart_in_place_until_max_restarts_on_errors_then_give_up() -> None:
    p, h = policy(max_restarts_on_errors=2), History()
    for n in (1, 2):
        d, h = step(p, h, K.USER_ERROR, "a", now=float(n))
        assert (d.action, d.region) == (Action.RESTART_IN_PLACE, "a")
        assert h.restarts_on_errors == n
    d, h = step(p, h, K.USER_ERROR, "a", now=3.0)
    assert d.action is Action.GIVE_UP
    assert "recovery.max_restarts_on_errors" in d.reason


def test_user_errors_do_not_spend_the_failover_budget_or_mark_the_region_failed() -> None:
    p, h = policy(max_failovers=1, max_restarts_on_errors=1), History()
    _, h = step(p, h, K.USER_ERROR, "a", now=0.0)
    assert (h.failovers, h.region_failed_at) == (0, {})
    d, h = step(p, h, K.CLUSTER_LOST, "a", now=1.0)
    assert (d.action, d.region) == (Action.FAILOVER, "b")


def test_precheck_failure_gives_up_at_once_with_budget_left() -> None:
    p, h = policy(max_failovers=5), History()
    d, h2 = step(p, h, K.PRECHECK, "a", now=0.0)
    assert (d.action, d.region) == (Action.GIVE_UP, None)
    assert h2.failovers == 0


def test_no_capacity_moves_to_the_next_region_and_marks_the_region_failed() -> None:
    d, h = step(policy(), History(), K.NO_CAPACITY, "a", now=5.0)
    assert (d.action, d.region) == (Action.FAILOVER, "b")
    assert h.region_failed_at == {"a": 5.0}


def test_runtime_lost_restarts_in_place_and_spends_the_failover_budget() -> None:
    p, h = policy(max_failovers=1), History()
    d, h = step(p, h, K.RUNTIME_LOST, "b", now=0.0)
    assert (d.action, d.region) == (Action.RESTART_IN_PLACE, "b")
    assert (h.failovers, h.region_failed_at) == (1, {})
    d, _ = step(p, h, K.RUNTIME_LOST, "b", now=1.0)
    assert d.action is Action.GIVE_UP


def test_next_region_skips_a_region_within_cooldown_and_returns_it_once_cooldown_passes() -> None:
    failed = {"b": 100.0}
    assert next_region(CANDIDATES, "a", failed, now=100.0 + COOLDOWN - 0.001, cooldown_s=COOLDOWN) == "c"
    assert next_region(CANDIDATES, "a", failed, now=100.0 + COOLDOWN, cooldown_s=COOLDOWN) == "b"


def test_next_region_wraps_from_the_last_candidate_to_the_first() -> None:
    assert next_region(CANDIDATES, "c", {}, now=0.0, cooldown_s=COOLDOWN) == "a"
    assert next_region(CANDIDATES, "b", {"c": 0.0}, now=1.0, cooldown_s=COOLDOWN) == "a"


def test_next_region_never_picks_the_region_that_just_failed() -> None:
    assert next_region(["a"], "a", {}, now=0.0, cooldown_s=0.0) is None


def test_every_region_failed_within_cooldown_gives_up_naming_region_cooldown() -> None:
    p, h = policy(max_failovers=10), History()
    _, h = step(p, h, K.CLUSTER_LOST, "a", now=0.0)
    _, h = step(p, h, K.CLUSTER_LOST, "b", now=10.0)
    d, h = step(p, h, K.CLUSTER_LOST, "c", now=20.0)
    assert (d.action, d.region) == (Action.GIVE_UP, None)
    assert "recovery.region_cooldown_s" in d.reason


def test_after_cooldown_a_failed_region_is_a_failover_target_again() -> None:
    p, h = policy(max_failovers=10), History()
    _, h = step(p, h, K.CLUSTER_LOST, "a", now=0.0)
    _, h = step(p, h, K.CLUSTER_LOST, "b", now=10.0)
    d, _ = step(p, h, K.LEASE_EXPIRED, "c", now=COOLDOWN)
    assert (d.action, d.region) == (Action.FAILOVER, "a")


@pytest.mark.parametrize("kind", [K.CLUSTER_LOST, K.LEASE_EXPIRED, K.WORKERS_EXHAUSTED, K.PROVISION_ERROR])
def test_region_failures_fail_over_and_mark_the_region(kind: FailureKind) -> None:
    d, h = step(policy(), History(), kind, "b", now=7.0)
    assert (d.action, d.region) == (Action.FAILOVER, "c")
    assert h.region_failed_at == {"b": 7.0}


def test_preemptions_fail_over_on_their_own_budget_and_leave_no_cooldown() -> None:
    p = FailurePolicy(CANDIDATES, Budgets(0, 0, COOLDOWN, max_preemptions=2))
    h = History()
    d, h = step(p, h, K.PREEMPTED, "a", now=0.0)
    assert (d.action, d.region) == (Action.FAILOVER, "b")
    # The preempted region is not held against later: b's preemption can go back to c, then a.
    d, h = step(p, h, K.PREEMPTED, "b", now=1.0)
    assert (d.action, d.region) == (Action.FAILOVER, "c")
    assert (h.preemptions, h.failovers, h.region_failed_at) == (2, 0, {})
    d, h = step(p, h, K.PREEMPTED, "c", now=2.0)
    assert d.action is Action.GIVE_UP and "recovery.max_preemptions=2" in d.reason


def test_a_lone_region_restarts_in_place_after_a_preemption() -> None:
    p = FailurePolicy(["a"], Budgets(0, 0, COOLDOWN))
    d, _ = step(p, History(), K.PREEMPTED, "a", now=0.0)
    assert (d.action, d.region) == (Action.RESTART_IN_PLACE, "a")


def _ranked(order: list[str]):  # type: ignore[no-untyped-def]
    from recovery.placement import Score

    def ranker(lost: str | None) -> list[Score]:
        return [Score(r, 1.0, float(i), 1.0, 0.0, 0.0, 0.0, None, False) for i, r in enumerate(order)]

    return ranker


def test_placed_by_cost_a_preempted_region_still_cheapest_to_finish_restarts_in_place() -> None:
    p = FailurePolicy(CANDIDATES, Budgets(5, 0, COOLDOWN), _ranked(["b", "a", "c"]))
    d, h = step(p, History(), K.PREEMPTED, "b", now=0.0)
    assert (d.action, d.region) == (Action.RESTART_IN_PLACE, "b")
    assert "still the lowest expected cost" in d.reason and d.placement is not None
    assert (h.preemptions, h.region_failed_at) == (1, {})
    # Ranked below another: it leaves, as without a ranker.
    d, _ = step(p, History(), K.PREEMPTED, "a", now=0.0)
    assert (d.action, d.region) == (Action.FAILOVER, "b")
    # A region that is down (not a reclaimed VM) is left, however cheap.
    d, _ = step(p, History(), K.CLUSTER_LOST, "b", now=0.0)
    assert (d.action, d.region) == (Action.FAILOVER, "a")


def test_a_lost_controller_costs_no_failover() -> None:
    failure = Failure(K.CONTROLLER_LOST, "a", "")
    h = History().after(failure, Decision(Action.RESTART_IN_PLACE, "a", ""), 0.0)
    assert (h.failovers, h.region_failed_at) == (0, {})


def test_a_region_too_small_for_min_workers_is_skipped_and_the_decision_says_so() -> None:
    small = {"b": "1 worker(s) fit (1 node(s) of 1 CPUs), fewer than 2 (trainer.min_workers)"}
    budgets = Budgets(max_failovers=3, max_restarts_on_errors=1, region_cooldown_s=600.0, too_small=small)
    lost = Failure(FailureKind.CLUSTER_LOST, "a", "head gone")
    d = decide(lost, ["a", "b", "c"], History(), budgets, now=100.0)
    assert d.action is Action.FAILOVER and d.region == "c"
    assert "skipped b: 1 worker(s) fit" in d.reason
    # Nothing else fits: the run gives up, naming the skipped region too.
    d = decide(lost, ["a", "b"], History(), budgets, now=100.0)
    assert d.action is Action.GIVE_UP and "skipped b" in d.reason
    # Without the limit the small region is the next, as before.
    d = decide(lost, ["a", "b", "c"], History(), Budgets(3, 1, 600.0), now=100.0)
    assert d.region == "b" and "skipped" not in d.reason
    assert passed_over(["a", "b", "c"], "", "c", small) == ["b"]


def test_a_node_lost_with_too_few_workers_left_is_a_region_failure() -> None:
    f = Failure(FailureKind.NODE_LOST, "a", "node(s) [1] lost and not replaced")
    d = decide(f, ["a", "b"], History(), Budgets(3, 1, 600.0), now=5.0)
    assert d.action is Action.FAILOVER and d.region == "b"
    assert History().after(f, d, 5.0).region_failed_at == {"a": 5.0}


def _user_error(step: int | None, error: str = "ValueError: loss exploded") -> Failure:
    return Failure(K.USER_ERROR, "a", f"{error} in step {step}", user_error_signature(error, step))


def _after(p: FailurePolicy, h: History, failure: Failure, now: float) -> tuple[Decision, History]:
    d = p.make_decision(failure, h, now)
    return d, h.after(failure, d, now)


def test_a_user_error_that_recurs_at_the_same_step_after_a_restart_fails_the_run_at_once() -> None:
    p, h = policy(max_restarts_on_errors=5), History()
    d, h = _after(p, h, _user_error(12), 0.0)
    assert (d.action, d.region) == (Action.RESTART_IN_PLACE, "a")
    assert h.user_error == user_error_signature("ValueError: loss exploded", 12)
    d, h = _after(p, h, _user_error(12), 1.0)
    # Four restarts of budget left, none used: the same error at the same step is a bug.
    assert (d.action, d.region) == (Action.GIVE_UP, None)
    assert "same step" in d.reason and "ValueError: loss exploded in step 12" in d.reason
    assert "fix" in d.reason
    assert (h.restarts_on_errors, h.failovers, h.region_failed_at) == (1, 0, {})


def test_a_user_error_at_another_step_after_a_restart_stays_within_the_restart_budget() -> None:
    p, h = policy(max_restarts_on_errors=2), History()
    d, h = _after(p, h, _user_error(12), 0.0)
    assert d.action is Action.RESTART_IN_PLACE
    d, h = _after(p, h, _user_error(17), 1.0)  # flaky: not where it was
    assert d.action is Action.RESTART_IN_PLACE
    d, h = _after(p, h, _user_error(12), 2.0)  # 12 again, but 17 came last: the budget decides
    assert d.action is Action.GIVE_UP and "recovery.max_restarts_on_errors=2" in d.reason


def test_a_different_message_at_the_same_step_is_another_error() -> None:
    p, h = policy(max_restarts_on_errors=2), History()
    _, h = _after(p, h, _user_error(3, "ValueError: nan at row 7"), 0.0)
    d, _ = _after(p, h, _user_error(3, "ValueError: nan at row 9"), 1.0)
    assert d.action is Action.RESTART_IN_PLACE


def test_a_user_error_without_a_known_step_is_never_taken_for_a_repeat() -> None:
    p, h = policy(max_restarts_on_errors=2), History()
    _, h = _after(p, h, _user_error(None), 0.0)
    d, _ = _after(p, h, _user_error(None), 1.0)
    assert d.action is Action.RESTART_IN_PLACE
    assert not repeats_user_error(_user_error(None), h)


def test_the_first_user_error_restarts_in_place_once_and_never_fails_over() -> None:
    p, h = policy(max_failovers=2, max_restarts_on_errors=1), History()
    d, h = _after(p, h, _user_error(1), 0.0)
    assert (d.action, d.region) == (Action.RESTART_IN_PLACE, "a")
    d, h = _after(p, h, _user_error(1), 1.0)
    assert d.action is Action.GIVE_UP
    assert h.failovers == 0


def test_an_infrastructure_failure_between_two_user_errors_does_not_hide_the_repeat() -> None:
    p, h = policy(max_restarts_on_errors=3), History()
    _, h = _after(p, h, _user_error(40), 0.0)
    d, h = _after(p, h, Failure(K.CLUSTER_LOST, "a", "gone"), 1.0)
    assert d.action is Action.FAILOVER
    d, _ = _after(p, h, replace(_user_error(40), region="b"), 2.0)
    assert d.action is Action.GIVE_UP


def test_a_user_error_raised_again_in_its_own_process_fails_the_run_without_a_restart() -> None:
    from dataclasses import replace

    p, h = policy(max_restarts_on_errors=5), History()
    d, h = _after(p, h, replace(_user_error(12), repeats=True), 0.0)
    assert (d.action, d.region) == (Action.GIVE_UP, None)
    assert "run once more in the same process" in d.reason and "ValueError: loss exploded in step 12" in d.reason
    assert (h.restarts_on_errors, h.failovers, h.region_failed_at) == (0, 0, {})


def test_classify_carries_a_user_error_that_repeated_into_its_failure() -> None:
    from recovery.detection import Health, Lease, Observation, classify

    obs = Observation(None, Health.UP, 0.1, 5.0, user_error="ValueError: x", user_error_step=3)
    lease = Lease(1.0, 5.0)
    assert classify(obs, "a", lease).repeats is False  # type: ignore[union-attr]
    from dataclasses import replace

    assert classify(replace(obs, user_error_repeats=True), "a", lease).repeats is True  # type: ignore[union-attr]


# --- recovery.placement=cost: a ranker's order ---------------------------------------------------


def _ranker(order: list[str], asked: list[str | None]):  # type: ignore[no-untyped-def]
    from recovery.placement import Outlook, rank

    prices = {r: 1.0 + i for i, r in enumerate(order)}

    def ranker(lost: str | None) -> list:  # type: ignore[type-arg]
        asked.append(lost)
        return rank([Outlook(r, prices[r], 0.0, 0.0, 0.0, 0.0) for r in CANDIDATES], 1.0, 0.1)

    return ranker


def test_with_a_ranker_a_failover_goes_to_the_cheapest_eligible_not_the_next_listed() -> None:
    asked: list[str | None] = []
    p = FailurePolicy(CANDIDATES, Budgets(5, 1, COOLDOWN), _ranker(["c", "a", "b"], asked))
    d, h = step(p, History(), K.CLUSTER_LOST, "a", now=0.0)
    assert (d.action, d.region) == (Action.FAILOVER, "c") and asked == ["a"]
    assert "placement=cost: lowest expected cost to finish ($1, 1 h)" in d.reason
    assert d.placement is not None and [row["region"] for row in d.placement["table"]] == ["c", "a", "b"]
    # c lost too: a, the cheapest left, is cooling down; b it is.
    d, h = step(p, h, K.CLUSTER_LOST, "c", now=10.0)
    assert (d.action, d.region) == (Action.FAILOVER, "b")


def test_with_a_ranker_a_too_small_region_is_passed_over_and_said() -> None:
    budgets = Budgets(5, 1, COOLDOWN, too_small={"c": "1 of 2 workers fit"})
    p = FailurePolicy(CANDIDATES, budgets, _ranker(["c", "b", "a"], []))
    d, _ = step(p, History(), K.CLUSTER_LOST, "a", now=0.0)
    assert d.region == "b" and "skipped c: 1 of 2 workers fit" in d.reason
    assert p.first_placement()[0] == "b"


def test_a_user_error_asks_no_ranker_and_the_first_placement_is_the_cheapest() -> None:
    asked: list[str | None] = []
    p = FailurePolicy(CANDIDATES, Budgets(5, 1, COOLDOWN), _ranker(["b", "c", "a"], asked))
    d, _ = step(p, History(), K.USER_ERROR, "a", now=0.0)
    assert d.action is Action.RESTART_IN_PLACE and d.placement is None and asked == []
    region, placement = p.first_placement()
    assert region == "b" and placement is not None and placement["policy"] == "cost" and asked == [None]
    assert policy().first_placement() == ("a", None)
