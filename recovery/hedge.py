"""Hedged provisioning: when to start the next region's cluster before a loss is declared,
and when to take the bet back. Pure.

A loss is declared only once the heartbeat lease has run out (``recovery.heartbeat_timeout_s``,
10 s by default) or the provider says the cluster is gone; a launch takes far longer than
that on a cloud. A hedge starts the launch at the first sign of trouble, so a failover
that does come finds the cluster (its runtime up and waiting) part or all of the way there.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from recovery.detection import Observation


@dataclass(frozen=True)
class HedgeRule:
    # A heartbeat older than this is a sign of trouble (well inside the lease).
    after_s: float
    # Hedges a run may launch in all: each can cost one cluster from the sign to the verdict.
    max_launches: int


def hedge_after_s(configured: float, heartbeat_interval_s: float, heartbeat_timeout_s: float) -> float:
    """``recovery.hedge_after_s``, or (0) two heartbeats missed and half of the next, never
    past half the lease: at the lease's end the loss itself is declared, and a hedge no
    earlier than that is no earlier than the failover's own launch."""
    if configured > 0:
        return configured
    return min(2.5 * heartbeat_interval_s, heartbeat_timeout_s / 2)


def trouble(obs: Observation, noticed: bool, rule: HedgeRule) -> str | None:
    """The first sign of trouble in one look, in words, or None: a preemption notice, or no
    heartbeat for ``rule.after_s``. A health check that is not UP while heartbeats come is
    a glitch, not a sign: the runtime that writes them is plainly alive."""
    if obs.runtime_exit is not None:
        return None  # the attempt ended: its verdict, not a hedge, decides what comes next
    if noticed:
        return "a preemption notice"
    age = obs.heartbeat_age_s
    if age is not None and age > rule.after_s:
        return f"no heartbeat for {age:.1f} s"
    return None


class HedgeAction(StrEnum):
    START = "start"
    CANCEL = "cancel"


@dataclass(frozen=True)
class HedgeView:
    """What the hedging side knows: whether a hedge is out, and how many were launched."""

    out: bool
    launches: int


def answered(obs: Observation, noticed: bool, rule: HedgeRule) -> bool:
    """The region answers again: its runtime runs, a heartbeat within ``rule.after_s``, and no
    preemption notice (a notice is never taken back: the reclaim follows it)."""
    age = obs.heartbeat_age_s
    return obs.runtime_exit is None and not noticed and age is not None and age <= rule.after_s


def hedge_action(view: HedgeView, sign: str | None, answers: bool, rule: HedgeRule) -> HedgeAction | None:
    """Start a hedge at a sign of trouble (``trouble``) while the budget lasts; take it back
    once the region answers again (``answered``). Neither (a look that says nothing new):
    leave things as they are."""
    if not view.out and sign is not None and view.launches < rule.max_launches:
        return HedgeAction.START
    if view.out and answers:
        return HedgeAction.CANCEL
    return None
