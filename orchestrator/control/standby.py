"""Warm standby (``recovery.standby=true``): the next region's cluster, up and waiting.

While an attempt runs, a cluster is provisioned in the region the policy would
fail over to, and the runtime is started there in standby mode: Ray Train's
workers come up, load the data, build the model, then wait for an activation
file. A failover to that region skips provisioning and start-up: the controller
copies the newest checkpoint into the region's store and activates. The price is
a second cluster for the length of the run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from orchestrator.control.cleanup import tear_down
from orchestrator.control.context import RunContext
from orchestrator.runstate.events import StandbyFailed, StandbyLost, StandbyReady
from providers.base import ClusterHandle, ProvisionError, RuntimeProcess
from recovery.detection import Health, Observation
from recovery.policy import History, next_region


@dataclass
class Warm:
    """A cluster up before its attempt: with the runtime waiting for its go (``proc``, a
    run's own standby), or bare (a standby pool's, ``pool``: the attempt starts its runtime)."""

    region: str
    generation: int
    cluster: ClusterHandle
    proc: RuntimeProcess | None
    pool: str | None = None


Launch = Callable[..., ClusterHandle]  # (region, generation, purpose=) -> a journaled cluster
StartRuntime = Callable[..., RuntimeProcess]  # (cluster, region, generation, standby=) -> the driver


class Standby(Protocol):
    """What the attempt runner and the controller ask of a standby: the run's own
    (StandbyManager) or a pool's (orchestrator/control/pool.py, PooledStandby)."""

    launch: Launch | None
    start_runtime: StartRuntime | None

    def ensure(self, current: str) -> None: ...

    def take(self, region: str) -> Warm | None: ...

    def check(self) -> None: ...

    def observe(self, obs: Observation, noticed: bool) -> None: ...

    def close(self) -> None: ...


class StandbyManager:
    def __init__(
        self,
        ctx: RunContext,
        alloc_generation: Callable[[], int],
        history: Callable[[], History] = History,
    ) -> None:
        self.ctx = ctx
        self.enabled = self._wanted(ctx)
        self.alloc_generation = alloc_generation
        self.history = history
        # The attempt runner's, given once it exists: a standby is launched and started as an attempt is.
        self.launch: Launch | None = None
        self.start_runtime: StartRuntime | None = None
        self._lock = threading.Lock()
        self._warm: Warm | None = None
        self._thread: threading.Thread | None = None
        self._target: str | None = None
        self._closed = False

    @staticmethod
    def _wanted(ctx: RunContext) -> bool:
        """Does the run want this manager's standbys at all (``recovery.standby``)?"""
        return ctx.cfg.recovery.standby

    def ensure(self, current: str) -> None:
        """Stand by in the region a failover from ``current`` would pick, if not already."""
        if not self.enabled or self._closed:
            return
        now = self.ctx.clock()
        target = next_region(
            self.ctx.candidates,
            current,
            {**self.history().region_failed_at, current: now},
            now,
            self.ctx.cfg.recovery.region_cooldown_s,
        )
        with self._lock:
            if target is None or target == self._target:
                return
        self._drop()
        with self._lock:
            self._target = target
            self._thread = threading.Thread(target=self._prepare, args=(target,), name="standby", daemon=True)
            self._thread.start()

    def _current(self, region: str) -> bool:
        """Is the calling preparation still the one wanted? Not once dropped or closed, nor
        once a newer one for the same region started (a hedge cancelled, then hedged
        again, while its first launch was still under way). Under the lock."""
        return not self._closed and self._target == region and self._thread is threading.current_thread()

    def _prepare(self, region: str) -> None:
        assert self.launch is not None and self.start_runtime is not None
        gen = self.alloc_generation()
        try:
            cluster = self.launch(region, gen, purpose="standby")
        except ProvisionError:
            with self._lock:
                if self._current(region):
                    self._target = None
            return
        with self._lock:
            dropped = not self._current(region)
        if dropped:
            # Dropped while it launched (a hedge whose region answered again): no runtime for it.
            tear_down(self.ctx.provider, self.ctx.emit, cluster, purpose="standby")
            return
        try:
            proc = self.start_runtime(cluster, region, gen, standby=True)
        except Exception as exc:
            # Launched and not yet tracked: nothing else would ever tear it down.
            self.ctx.emit(StandbyFailed(region=region, generation=gen, error=str(exc)[:500]))
            with self._lock:
                if self._current(region):
                    self._target = None
            tear_down(self.ctx.provider, self.ctx.emit, cluster, purpose="standby")
            return
        warm = Warm(region, gen, cluster, proc)
        with self._lock:
            stale = not self._current(region)
            if not stale:
                self._warm = warm
        if stale:
            self._teardown(warm)
        else:
            self.ctx.emit(StandbyReady(region=region, generation=gen, cluster=cluster.name))

    def take(self, region: str) -> Warm | None:
        """The standby, if it stands in ``region`` and is healthy; it is then the caller's."""
        if not self.enabled:
            return None
        thread = self._thread
        if thread is not None and self._target == region:
            # Still coming up: waiting for it beats starting from nothing.
            thread.join(timeout=self.ctx.cfg.recovery.provision_timeout_s)
        with self._lock:
            warm = self._warm if self._warm is not None and self._warm.region == region else None
            if warm is not None:
                self._warm, self._target = None, None
        if warm is not None and self._healthy(warm):
            return warm
        if warm is not None:
            self.ctx.emit(StandbyLost(region=warm.region, generation=warm.generation))
            self._teardown(warm)
        return None

    def check(self) -> None:
        """Drop a standby that died; the next ensure() stands up a new one."""
        with self._lock:
            warm = self._warm
        if warm is not None and not self._healthy(warm):
            self.ctx.emit(StandbyLost(region=warm.region, generation=warm.generation))
            with self._lock:
                if self._warm is warm:
                    self._warm, self._target = None, None
            self._teardown(warm)

    def observe(self, obs: Observation, noticed: bool) -> None:
        """A look at the running attempt (``noticed``: a preemption notice seen): a standby
        stands from the attempt's start, whatever the looks say (a hedge does not)."""

    def close(self) -> None:
        with self._lock:
            self._closed = True
        thread = self._thread
        if thread is not None:
            thread.join(timeout=self.ctx.cfg.recovery.provision_timeout_s + 30)
        self._drop()

    def _healthy(self, warm: Warm) -> bool:
        # Dropped only for a cluster gone for sure: a check that is not UP once is a glitch.
        return warm.proc.poll() is None and self.ctx.provider.health(warm.cluster).health is not Health.GONE

    def _drop(self) -> None:
        with self._lock:
            warm, self._warm, self._target = self._warm, None, None
        if warm is not None:
            self._teardown(warm)

    def _teardown(self, warm: Warm) -> None:
        tear_down(self.ctx.provider, self.ctx.emit, warm.cluster, purpose="standby")
