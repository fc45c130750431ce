"""The failure policy: what to do about a failure. Pure: no clocks, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from recovery.detection import Failure, FailureKind
from recovery.placement import Score


class Action(StrEnum):
    RESTART_IN_PLACE = "restart_in_place"
    FAILOVER = "failover"
    GIVE_UP = "give_up"


@dataclass(frozen=True)
class Decision:
    action: Action
    region: str | None
    reason: str
    # recovery.placement=cost: {"policy": "cost", "table": [each candidate's Score.as_dict(), best first]}.
    placement: dict[str, Any] | None = None


@dataclass(frozen=True)
class Budgets:
    max_failovers: int
    max_restarts_on_errors: int
    region_cooldown_s: float
    max_preemptions: int = 10
    # Regions the run cannot train in, by why (fewer workers fit than trainer.min_workers):
    # never chosen; a decision that passes one over says so.
    too_small: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class History:
    # Recoveries from anything but a user error (failovers and driver restarts alike):
    # recovery.max_failovers bounds them all.
    failovers: int = 0
    restarts_on_errors: int = 0
    preemptions: int = 0
    # The signature of the last user error the run restarted after (Failure.signature).
    user_error: str = ""
    # region -> time of its last failure (seconds, any clock the caller uses consistently)
    region_failed_at: dict[str, float] = field(default_factory=dict)

    def after(self, failure: Failure, decision: Decision, now: float) -> History:
        failed = dict(self.region_failed_at)
        if failure.kind in _REGION_FAILURES:
            failed[failure.region] = now
        user = failure.kind is FailureKind.USER_ERROR
        preempted = failure.kind is FailureKind.PREEMPTED
        # A controller's death is not the region's doing, nor a failover.
        counted = not user and not preempted and failure.kind is not FailureKind.CONTROLLER_LOST
        recovered = decision.action is not Action.GIVE_UP
        return replace(
            self,
            failovers=self.failovers + int(recovered and counted),
            restarts_on_errors=self.restarts_on_errors + int(recovered and user),
            preemptions=self.preemptions + int(recovered and preempted),
            user_error=failure.signature if recovered and user else self.user_error,
            region_failed_at=failed,
        )


# Failures that say the region itself is unusable for now.
_REGION_FAILURES = frozenset(
    {
        FailureKind.CLUSTER_LOST,
        FailureKind.LEASE_EXPIRED,
        FailureKind.WORKERS_EXHAUSTED,
        FailureKind.NODE_LOST,
        FailureKind.NO_CAPACITY,
        FailureKind.PROVISION_ERROR,
        FailureKind.PROVISION_TIMEOUT,
        FailureKind.OUTCOME_UNPROVEN,
    }
)


def next_region(
    candidates: list[str],
    current: str,
    failed_at: dict[str, float],
    now: float,
    cooldown_s: float,
    too_small: dict[str, str] | None = None,
    ranked: Sequence[str] | None = None,
) -> str | None:
    """The first candidate after ``current`` (in preference order, wrapping; or, given
    ``ranked``, in that order) not failed recently and not too small for the run."""
    for region in _order(candidates, current, ranked):
        if too_small and region in too_small:
            continue
        t = failed_at.get(region)
        if t is None or now - t >= cooldown_s:
            return region
    return None


def _order(candidates: list[str], current: str, ranked: Sequence[str] | None) -> list[str]:
    if ranked is not None:
        return [r for r in ranked if r != current and r in candidates]
    if current in candidates:
        i = candidates.index(current)
        return candidates[i + 1 :] + candidates[:i]
    return list(candidates)


def passed_over(
    candidates: list[str],
    current: str,
    target: str | None,
    too_small: dict[str, str],
    ranked: Sequence[str] | None = None,
) -> list[str]:
    """The too-small regions between ``current`` and ``target`` in preference order: what
    a decision skipped for their size (all of them when there is no target)."""
    skipped = []
    for region in _order(candidates, current, ranked):
        if region == target:
            break
        if region in too_small:
            skipped.append(region)
    return skipped


def _skips(
    candidates: list[str], current: str, target: str | None, too_small: dict[str, str], ranked: Sequence[str] | None
) -> str:
    skipped = passed_over(candidates, current, target, too_small, ranked)
    return "".join(f"; skipped {r}: {too_small[r]}" for r in skipped)


def repeats_user_error(failure: Failure, history: History) -> bool:
    """A user error that is the one the run last restarted after (same step, same
    exception type and message): deterministic, so another restart would only repeat it.
    One at another step (flaky, or data-dependent) stays within recovery.max_restarts_on_errors."""
    return (
        failure.kind is FailureKind.USER_ERROR and failure.signature != "" and failure.signature == history.user_error
    )


def decide(
    failure: Failure,
    candidates: list[str],
    history: History,
    budgets: Budgets,
    now: float,
    ranked: Sequence[str] | None = None,
) -> Decision:
    """What to do about ``failure``; a failover goes to the first eligible region after the
    failed one in ``candidates`` (wrapping), or in ``ranked`` (recovery.placement=cost)."""
    kind = failure.kind
    if kind is FailureKind.PRECHECK:
        return Decision(Action.GIVE_UP, None, f"{failure.region}: {failure.detail}")
    if kind is FailureKind.USER_ERROR:
        if failure.repeats:
            return Decision(
                Action.GIVE_UP,
                None,
                f"{failure.detail}: raised again when its step was run once more in the same process, a bug in "
                "the workload (a restart cannot help); fix it, then run again",
            )
        if repeats_user_error(failure, history):
            return Decision(
                Action.GIVE_UP,
                None,
                f"{failure.detail}: raised again at the same step after an in-place restart, a bug in "
                "the workload (retrying cannot help); fix it, then run again",
            )
        if history.restarts_on_errors < budgets.max_restarts_on_errors:
            return Decision(
                Action.RESTART_IN_PLACE,
                failure.region,
                f"user code error, restart {history.restarts_on_errors + 1} of "
                f"{budgets.max_restarts_on_errors} (recovery.max_restarts_on_errors)",
            )
        return Decision(
            Action.GIVE_UP,
            None,
            f"user code error after {history.restarts_on_errors} restarts "
            f"(recovery.max_restarts_on_errors={budgets.max_restarts_on_errors}): {failure.detail}",
        )
    if kind is FailureKind.PREEMPTED:
        return _after_preemption(failure, candidates, history, budgets, now, ranked)
    if history.failovers >= budgets.max_failovers:
        return Decision(
            Action.GIVE_UP,
            None,
            f"{kind} in {failure.region} after {history.failovers} recoveries "
            f"(recovery.max_failovers={budgets.max_failovers})",
        )
    if kind is FailureKind.RUNTIME_LOST:
        return Decision(Action.RESTART_IN_PLACE, failure.region, "driver lost, cluster healthy")
    failed = dict(history.region_failed_at)
    failed[failure.region] = now
    small = budgets.too_small
    target = next_region(candidates, failure.region, failed, now, budgets.region_cooldown_s, small, ranked)
    skips = _skips(candidates, failure.region, target, small, ranked)
    if target is None:
        return Decision(
            Action.GIVE_UP,
            None,
            f"{kind} in {failure.region} and every other candidate region failed within "
            f"recovery.region_cooldown_s={budgets.region_cooldown_s:g}{skips}",
        )
    return Decision(Action.FAILOVER, target, f"{kind} in {failure.region}: {failure.detail}{skips}")


def _after_preemption(
    failure: Failure,
    candidates: list[str],
    history: History,
    budgets: Budgets,
    now: float,
    ranked: Sequence[str] | None = None,
) -> Decision:
    """A reclaimed spot VM: its own budget, and the region is not held against later
    (capacity comes back), only left this once if another candidate is healthy."""
    if history.preemptions >= budgets.max_preemptions:
        return Decision(
            Action.GIVE_UP,
            None,
            f"preempted in {failure.region} after {history.preemptions} preemptions "
            f"(recovery.max_preemptions={budgets.max_preemptions})",
        )
    small = budgets.too_small
    failed_at = history.region_failed_at
    target = next_region(candidates, failure.region, failed_at, now, budgets.region_cooldown_s, small, ranked)
    if ranked is not None and _ranks_before(ranked, failure.region, target):
        # Placement by cost: the region itself is not down, only this VM was reclaimed, and
        # with the loss counted against it, it is still the cheapest place to finish.
        return Decision(
            Action.RESTART_IN_PLACE, failure.region, "preempted; still the lowest expected cost to finish here"
        )
    skips = _skips(candidates, failure.region, target, small, ranked)
    if target is None:
        return Decision(Action.RESTART_IN_PLACE, failure.region, f"preempted; no other region is healthy{skips}")
    return Decision(Action.FAILOVER, target, f"preempted in {failure.region}: checkpointed on notice{skips}")


def _ranks_before(ranked: Sequence[str], region: str, other: str | None) -> bool:
    """Does ``region`` rank before ``other`` (None: before nothing eligible)?"""
    if region not in ranked:
        return False
    return other is None or other not in ranked or ranked.index(region) < ranked.index(other)


# recovery.placement=cost: every candidate scored, best first, given the region just lost
# (None: the run's first placement). The controller measures and prices; this only ranks.
Ranker = Callable[[str | None], list[Score]]


class FailurePolicy:
    """``decide`` with the run's budgets bound; injectable into the controller. With a
    ``ranker`` (recovery.placement=cost), the first placement and each failover take the
    eligible region with the lowest expected cost to finish, and say why in the decision."""

    def __init__(self, candidates: list[str], budgets: Budgets, ranker: Ranker | None = None) -> None:
        self.candidates = list(candidates)
        self.budgets = budgets
        self.ranker = ranker

    def make_decision(self, failure: Failure, history: History, now: float) -> Decision:
        if self.ranker is None or failure.kind in (FailureKind.USER_ERROR, FailureKind.PRECHECK):
            return decide(failure, self.candidates, history, self.budgets, now)
        table = self.ranker(failure.region)
        decision = decide(failure, self.candidates, history, self.budgets, now, [s.region for s in table])
        placed = decision.action is Action.FAILOVER or (
            decision.action is Action.RESTART_IN_PLACE and failure.kind is FailureKind.PREEMPTED
        )
        if not placed:
            return decision
        return replace(
            decision,
            reason=f"{decision.reason}; {placed_text(table, decision.region)}",
            placement={"policy": "cost", "table": [s.as_dict() for s in table]},
        )

    def first_placement(self) -> tuple[str, dict[str, Any] | None]:
        """Where the run starts: the first listed region it fits in, or (with a ranker) the
        eligible one with the lowest expected cost to finish, and the table that chose it."""
        fits = [r for r in self.candidates if r not in self.budgets.too_small]
        if self.ranker is None:
            return fits[0], None
        table = self.ranker(None)
        best = next((s.region for s in table if s.region in fits), fits[0])
        return best, {"policy": "cost", "table": [s.as_dict() for s in table]}


def placed_text(table: list[Score], region: str | None) -> str:
    """Why ``region``: its expected cost and hours to finish, as the ranking weighed them."""
    chosen = next((s for s in table if s.region == region), None)
    if chosen is None:
        return "placement=cost"
    usd = "unpriced" if chosen.expected_usd is None else f"${chosen.expected_usd:.4g}"
    return f"placement=cost: lowest expected cost to finish ({usd}, {chosen.expected_hours:.3g} h)"
