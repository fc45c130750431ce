"""Hedged provisioning (``recovery.hedge_max_launches``): the next region's cluster,
launched at the first sign of trouble rather than at the declared loss.

A hedge is a warm standby (orchestrator/control/standby.py) that stands only while the
region it covers looks in trouble (recovery/hedge.py says when): launched, its runtime
started waiting, taken by the failover if the loss is declared, torn down if the region
answers again first. A launch still under way when the region answers is torn down as
it ends: nothing is left behind either way. Each start and cancel is journaled
(``hedge_started``, ``hedge_cancelled``), and its cluster costs as a standby's idle time.
"""

from __future__ import annotations

import functools

from orchestrator.control.context import RunContext
from orchestrator.control.standby import StandbyManager, Warm
from orchestrator.runstate.events import HedgeCancelled, HedgeStarted
from recovery.detection import Observation
from recovery.hedge import HedgeAction, HedgeRule, HedgeView, answered, hedge_action, hedge_after_s, trouble


class HedgeManager(StandbyManager):
    # What the hedging side knows: the region the run runs in, the hedges launched, and
    # the region one stands (or is launching) in.
    current: str | None = None
    launches = 0
    out: str | None = None

    @staticmethod
    def _wanted(ctx: RunContext) -> bool:
        return True  # built only when recovery.hedge_max_launches > 0 (orchestrator/control/wiring.py)

    @functools.cached_property
    def rule(self) -> HedgeRule:
        rec = self.ctx.cfg.recovery
        after = hedge_after_s(rec.hedge_after_s, rec.heartbeat_interval_s, rec.heartbeat_timeout_s)
        return HedgeRule(after_s=after, max_launches=rec.hedge_max_launches)

    def ensure(self, current: str) -> None:
        """The run is running in ``current``: what the looks are about from now. No launch:
        a hedge waits for a sign. One still out for an earlier region (the failover went
        elsewhere) has nothing left to cover."""
        if self.current != current and self.out is not None:
            self._cancel("the run now runs in " + current)
        self.current = current

    def observe(self, obs: Observation, noticed: bool) -> None:
        current = self.current
        if current is None or self._closed:
            return
        sign = trouble(obs, noticed, self.rule)
        answers = answered(obs, noticed, self.rule)
        action = hedge_action(HedgeView(self.out is not None, self.launches), sign, answers, self.rule)
        if action is HedgeAction.START and sign is not None:
            StandbyManager.ensure(self, current)
            target = self._target
            if target is None:
                return  # no region to go to (all cooling down): nothing launched, nothing spent
            self.launches += 1
            self.out = target
            self.ctx.emit(HedgeStarted(region=target, from_region=current, reason=sign, launches=self.launches))
            self.ctx.progress.note(f"{current}: {sign}; hedging: launching {target} before any loss is declared")
        elif action is HedgeAction.CANCEL:
            self._cancel(f"{current} answered again: a fresh heartbeat")

    def take(self, region: str) -> Warm | None:
        """The hedge, if it stands in the region the failover chose (it is then the failover's)."""
        warm = super().take(region)
        if self.out == region:
            self.out = None  # taken, or found dead and torn down: no longer out either way
        return warm

    def _cancel(self, reason: str) -> None:
        region, self.out = self.out, None
        if region is None:
            return
        self.ctx.emit(HedgeCancelled(region=region, from_region=self.current or "", reason=reason))
        self.ctx.progress.note(f"hedge in {region} cancelled: {reason}")
        self._drop()

    def close(self) -> None:
        if self.out is not None:
            self._cancel("the run ended")
        super().close()
