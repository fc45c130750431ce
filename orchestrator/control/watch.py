"""Watching one running attempt: runtime events, progress, faults, and the verdict.

Each wakeup lets the fault injector act and asks whether the runtime exited and how
the worker nodes are. Each look folds what the runtime reported into the journal and
the open incidents, then asks ``classify`` whether the attempt has failed (and how)
or succeeded; looks come less often while nothing happens (orchestrator/control/cadence.py).
A health check that is not UP while heartbeats are fresh is a glitch, journaled; a
connection to the runtime that ends without the runtime's word while heartbeats are
fresh is re-attached.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

from orchestrator.chaos.drill import drill_fault
from orchestrator.chaos.injector import FaultInjector, Injected
from orchestrator.config.derived import total_steps
from orchestrator.control.cadence import look_cap_ticks, next_look_ticks, quiet
from orchestrator.control.context import RunContext
from orchestrator.control.nodewatch import NodeWatch
from orchestrator.control.outcome import AttemptOutcome
from orchestrator.control.progress import chaos_text, failure_text, glitch_text, reattached_text, store_fallback_text
from orchestrator.control.stopreq import DRILL_NAME, take_request
from orchestrator.runstate.events import (
    DrillRequested,
    FailureDetected,
    HealthGlitch,
    IncidentRecorded,
    RuntimeReattached,
    RuntimeReport,
)
from orchestrator.runstate.incidents import Incident, first_step_time
from orchestrator.runstate.losses import append_losses
from orchestrator.wire.faults import NODE_FAULTS, REGION_FAULTS
from orchestrator.wire.schema import Event
from providers.base import ClusterHandle, RuntimeProcess
from recovery.detection import (
    EXIT_OK,
    HEALTH_SETTLE_S,
    Health,
    HealthCheck,
    Lease,
    Observation,
    classify,
    confirm_health,
    health_glitch,
    may_reattach,
)

POLL_S = 0.2  # between wakeups; a look every 1 to look_cap_ticks of them
ZOMBIE_SCAN_EVERY = 10  # looks
# A connection that keeps failing (a head unreachable over ssh) is tried again this often,
# while the heartbeat lease still vouches for the runtime.
REATTACH_EVERY_S = 1.0


def step_after_report(known: int, reported: int, raised_since_restart: bool) -> int:
    """The last step known done once a progress report of ``reported`` is read. A fault or a
    preemption read since the worker group last (re)started moved ``known`` to the step it
    struck at; a report read after it was written before it (reports come every half
    second, faults and looks in between), so it cannot lower it. After a restart the
    reports count from the restored checkpoint again, and do."""
    return max(known, reported) if raised_since_restart else reported


class AttemptWatch:
    """Watches one attempt to its verdict; ``out`` carries what it learns (``out.last_step``
    is the last step known done, moved by progress reports, faults and preemption notices)."""

    def __init__(
        self,
        ctx: RunContext,
        injector: FaultInjector,
        cluster: ClusterHandle,
        proc: RuntimeProcess,
        out: AttemptOutcome,
        pending: Incident | None,
        *,
        tick: Callable[[], None] = lambda: None,
        scan_zombies: Callable[[int], None] = lambda generation: None,
        journaled: frozenset[tuple[str, float]] = frozenset(),
    ) -> None:
        self.ctx = ctx
        self.injector = injector
        # Adopted from a crashed controller: what it journaled already is not journaled again.
        self.journaled = journaled
        self.tick = tick
        self.scan_zombies = scan_zombies
        self.cluster = cluster
        self.proc = proc
        self.out = out
        self.pending = pending
        self.gen, self.region = out.generation, out.region
        rec = ctx.cfg.recovery
        self.lease = Lease(
            rec.heartbeat_interval_s, rec.heartbeat_timeout_s, failures_to_lose=rec.health_failures_to_lose
        )
        # Health checks not UP in a row, counted once per look of the provider's.
        self.failed_checks = 0
        self.last_look: float | None = None
        self.next_reattach_at = 0.0
        self.seen: set[str] = set()
        self.open_incidents: list[Incident] = [pending] if pending is not None else []
        self.train_starts = 0
        self.train_started_at: float | None = None
        self.user_error: str | None = None
        self.user_error_step: int | None = None
        self.user_error_site: str | None = None
        self.user_error_repeats = False
        self.kill_times: dict[str, float] = {}
        # The newest step known done when each fault fired: its incident's last step, which
        # the watch's own count may have passed by the time the restart is read (a later
        # fault's step, read in the same look).
        self.kill_steps: dict[str, int] = {}
        # A fault or preemption moved out.last_step since the worker group last started.
        self.step_raised = False
        self.started = ctx.clock()
        self.last_progress_at = self.started
        self.looks = 0
        self.nodes = NodeWatch(ctx, cluster, self.region, self.gen)
        self.health_now = Health.UP  # the newest look's
        self.last_obs: Observation | None = None  # the newest look's
        self.new_kinds: list[str] = []  # of the events the newest look found

    def run(self) -> None:
        # Read at the call: tests make the wakeups shorter.
        cap = look_cap_ticks(self.lease.interval_s, POLL_S)
        wait = due = 1
        try:
            while True:
                fired = self._faults()
                due -= 1
                # An exit is seen at the wakeup after it, and judged by a look at once.
                if due <= 0 or fired or self.proc.poll() is not None:
                    if self._observe():
                        return
                    calm = self.last_obs is not None and quiet(self.last_obs, self.lease, self.new_kinds, fired)
                    wait = due = next_look_ticks(wait, calm, cap)
                # A worker node is judged only while the head is UP: a region going
                # down takes its nodes along, and that is the cluster's loss.
                if self.health_now is Health.UP:
                    for loss in self.nodes.poll(self.out.last_step):
                        if loss.recorded:
                            self._no_restart_owed()
                time.sleep(POLL_S)
        finally:
            self.nodes.close(failed=self.out.failure is not None)

    def _no_restart_owed(self) -> None:
        # A node that ran no worker was lost: no restart comes for it, so a node fault's
        # time and step are no later incident's (another fault's restart).
        for kind in NODE_FAULTS:
            self.kill_times.pop(kind, None)
            self.kill_steps.pop(kind, None)

    def _observe(self) -> bool:
        """What the runtime reported, the standby and logs, and the verdict: True once
        the attempt has ended."""
        self.new_kinds = self._events()
        self._progress()
        self.tick()
        self.looks += 1
        if self.looks % ZOMBIE_SCAN_EVERY == 0:
            self.scan_zombies(self.gen)
        return self._verdict()

    # --- what the runtime said ----------------------------------------------------
    def _events(self) -> list[str]:
        """Fold the runtime's new events in; their kinds."""
        with self.ctx.batch():  # one fsync for the look's lines
            return self._fold_events()

    def _fold_events(self) -> list[str]:
        ctx = self.ctx
        kinds = []
        for ev in ctx.control.read_events(self.gen, self.seen):
            kind = ev.kind
            kinds.append(kind)
            if kind == "losses":
                # The plot's series: its own file, not the journal.
                append_losses(
                    ctx.run_dir,
                    [
                        {"generation": self.gen, "region": self.region, "step": step, "loss": loss}
                        for step, loss in ev.fields["points"]
                    ],
                )
                ctx.metrics.losses(ev.fields["points"], ev.time)
                continue
            if (kind, ev.time) not in self.journaled:
                # Its own namespace, and "by" stamped last: whatever kind the runtime
                # claims, replay never reads it as a controller event.
                fields = {"region": self.region, **ev.fields, "time": ev.time, "generation": ev.generation}
                ctx.emit(RuntimeReport(kind=kind, fields={**fields, "by": "runtime"}))
            on_event = self._ON_EVENT.get(kind)
            if on_event is not None:
                on_event(self, ev)
        return kinds

    # --- what the controller does with a runtime event of each kind (_ON_EVENT) ----
    def _on_replicated(self, ev: Event) -> None:
        if ev.get("lag_s") is not None:
            self.ctx.progress.replication_lag(float(ev.fields["lag_s"]))

    def _on_store_fallback(self, ev: Event) -> None:
        ctx = self.ctx
        if ev.fields["to"] in ctx.stores:
            # The runtime commits elsewhere now: replicate from there.
            ctx.replicator.follow(ctx.stores[str(ev.fields["to"])], list(ctx.stores.values()))
            ctx.progress.note(store_fallback_text(ev.get("from"), ev.get("to")))

    def _on_user_error(self, ev: Event) -> None:
        if self.user_error is None:
            self.user_error = str(ev.fields["error"])
            # Validated by the wire's schema (a count, a bounded string) when present.
            step, site = ev.get("step"), ev.get("site")
            self.user_error_step = step if isinstance(step, int) else None
            self.user_error_site = site if isinstance(site, str) else None
            self.user_error_repeats = ev.get("deterministic") is True

    def _on_preempted(self, ev: Event) -> None:
        # Committed at this step: nothing after it was lost.
        self.out.last_step = max(self.out.last_step, int(ev.fields["step"]))
        self.step_raised = True

    def _on_preemption_notice(self, ev: Event) -> None:
        # The cloud's (or Ray's) notice is when the preemption began; a drill's
        # injection, journaled before the runtime relays it, stays the earlier.
        self.kill_times.setdefault("preempt", ev.time)

    def _catch_up(self) -> None:
        self.new_kinds += self._events()

    def _train_started(self, ev: Event) -> None:
        self.train_starts += 1
        self.step_raised = False
        restored = int(ev.fields["restored_step"])
        world = ev.fields.get("world_size")
        world = int(world) if isinstance(world, int) else None
        before, self.nodes.world = self.nodes.world, world
        nodes = ev.fields.get("worker_nodes")  # validated by the wire's schema when present
        held = sorted(set(nodes)) if isinstance(nodes, list) and nodes else []
        self.nodes.world_nodes = frozenset(held) if held else None
        if self.train_starts == 1:
            self.train_started_at = ev.time
            self.out.restored_step = restored
            if self.pending is not None:
                self.pending.restored_step = restored
            return
        loss = self.nodes.unrecorded()
        if loss is not None:
            # The worker group restarted after a node's loss: on its replacement, or on fewer workers.
            loss.recorded = True
            failed_at = self.kill_times.pop("kill_node", None) or self.kill_times.pop("hang_node", None)
            fault_step = self.kill_steps.pop("kill_node", None)
            fault_step = self.kill_steps.pop("hang_node", None) if fault_step is None else fault_step
            last = fault_step if fault_step is not None else loss.last_step
            self.open_incidents.append(
                Incident(
                    kind="node_lost",
                    from_region=self.region,
                    to_region=self.region,
                    failed_at=failed_at or loss.at,
                    detected_at=loss.at,
                    last_step=self.out.last_step if last is None else last,
                    restored_step=restored,
                    generation=self.gen,
                    node=loss.node,
                    world_size_before=loss.world_before if loss.world_before is not None else before,
                    world_size_after=world,
                    replace_s=loss.replace_s,
                )
            )
            return
        # Ray Train restarted the worker group in place.
        self.open_incidents.append(
            Incident(
                kind="worker_lost",
                from_region=self.region,
                to_region=self.region,
                failed_at=self.kill_times.pop("kill_worker", self.last_progress_at),
                detected_at=ev.time,
                last_step=self.kill_steps.pop("kill_worker", self.out.last_step),
                restored_step=restored,
                generation=self.gen,
            )
        )

    # The runtime's event kinds the controller acts on, beyond journaling them.
    _ON_EVENT: ClassVar[dict[str, Callable[[AttemptWatch, Event], None]]] = {
        "replicated": _on_replicated,
        "store_fallback": _on_store_fallback,
        "user_error": _on_user_error,
        "train_started": _train_started,
        "preempted": _on_preempted,
        "preemption_notice": _on_preemption_notice,
    }

    def _progress(self) -> None:
        prog = self.ctx.control.read_progress(self.gen)
        if prog is None or prog.time == self.last_progress_at:
            return  # only a new report moves the step: a fault's step can be newer
        step = prog.step
        self.last_progress_at = prog.time
        self.out.last_step = step_after_report(self.out.last_step, step, self.step_raised)

        for inc in list(self.open_incidents):
            if inc.restored_step is not None and step > inc.restored_step:
                inc.first_step_at = first_step_time(prog.fields, inc.restored_step, inc.failed_at, prog.time)
                self.open_incidents.remove(inc)
                self.out.incidents.append(inc)
                self.ctx.emit(IncidentRecorded(**inc.record()))  # type: ignore[arg-type]
        shown = prog.as_dict()
        if self.nodes.count > 1:
            shown["nodes"] = f"{self.nodes.count - len(self.nodes.missing())}/{self.nodes.count}"
        if "workers" not in shown:
            shown["workers"] = self.ctx.cfg.trainer.workers
        self.ctx.progress.update(self.region, self.gen, shown)
        self.ctx.metrics.progress(prog.as_dict())

    def _faults(self) -> bool:
        """Let the injector answer the workers' requests and fire timed faults; whether any fired."""
        injector = self.injector
        training_for = None if self.train_started_at is None else self.ctx.clock() - self.train_started_at
        # What the runtime reported before it asked for the fault is read first: a restart
        # it reported then is the previous fault's, and is recorded with that fault's time
        # and step before this one's replace them.
        fired = injector.poll(self.cluster, self.proc.pid, self.gen, before_fire=self._catch_up)
        fired += injector.timed(self.cluster, self.proc.pid, self.gen, training_for, self.out.last_step)
        fired += self._drill()
        for inj in fired:
            self.kill_times[inj.kind] = inj.at
            self.out.last_step = max(self.out.last_step, inj.step)
            self.step_raised = True
            self.kill_steps[inj.kind] = self.out.last_step
            if not inj.said:
                self.ctx.emit(inj.event())
            self.ctx.progress.note(chaos_text(inj.kind, inj.step, inj.detail))
        return bool(fired)

    def _drill(self) -> list[Injected]:
        """action=drill: a fault asked for the running attempt (``drill.request``), checked,
        journaled with who asked (``drill_requested``), then injected now."""
        try:
            req = take_request(self.ctx.run_dir, DRILL_NAME)
        except OSError:
            return []
        if req is None or req.fault is None:
            return []
        problem, fault = drill_fault(req.fault, self.region)
        kind = str(req.fault.get("kind"))[:64]
        self.ctx.emit(DrillRequested(kind=kind, who=req.who(), region=self.region, refused=problem))
        if fault is None:
            return []
        return [self.injector.drill(fault, self.cluster, self.proc.pid, self.gen, self.out.last_step)]

    # --- the verdict --------------------------------------------------------------
    def _health(self) -> HealthCheck:
        """The provider's health check (through the injector: chaos status_flap); a check
        that raises is one that could not tell."""
        provider, cluster = self.ctx.provider, self.cluster
        try:
            return self.injector.health(cluster, lambda: provider.health(cluster))
        except Exception as exc:
            return HealthCheck(Health.NOT_UP, time.time(), f"the health check raised {type(exc).__name__}: {exc}"[:300])

    def _look(self) -> tuple[HealthCheck, bool]:
        """The health check, counted into the streak of failed ones; whether it is a new look."""
        check = self._health()
        self.health_now = check.health
        new = check.at != self.last_look
        if new:
            self.last_look = check.at
            self.failed_checks = 0 if check.health is Health.UP else self.failed_checks + 1
        return check, new

    def _settled_health(self, check: HealthCheck) -> HealthCheck:
        """The cluster's health once a dying node has had time to show it."""
        deadline = time.monotonic() + HEALTH_SETTLE_S
        while check.health is Health.UP and time.monotonic() < deadline:
            time.sleep(0.1)
            check, _ = self._look()
        return check

    def _runtime_exit(self, heartbeat_age_s: float | None) -> int | None:
        """The runtime's exit status, or None while it runs as far as can be told. The
        runtime's word on the control channel is its status; a connection that ended
        without it, while heartbeats are fresh, is re-attached (``may_reattach``)."""
        code = self.proc.poll()
        if code is None:
            return None
        word = self.ctx.control.read_exit(self.gen)
        if word is not None:
            return word
        if not may_reattach(word, heartbeat_age_s, self.lease):
            return code
        now = time.monotonic()
        if now < self.next_reattach_at:
            return None  # between tries the lease vouches for the runtime
        self.next_reattach_at = now + REATTACH_EVERY_S
        try:
            new = self.ctx.provider.reattach(self.cluster, self.proc)
        except Exception as exc:  # no new connection now: tried again while the lease holds
            self.ctx.progress.note(f"re-attaching to the runtime in {self.region}: {type(exc).__name__}: {exc}")
            return None
        if new is None:
            return code  # the runtime is known to be gone: the connection's status is its
        self.ctx.emit(
            RuntimeReattached(
                region=self.region,
                generation=self.gen,
                connection_exit=code,
                pid=new.pid,
                heartbeat_age_s=None if heartbeat_age_s is None else round(heartbeat_age_s, 3),
            )
        )
        self.ctx.progress.note(reattached_text(self.region, code))
        self.proc = new
        return None

    def _verdict(self) -> bool:
        """True once the attempt has succeeded or failed (``out`` says which)."""
        ctx, out = self.ctx, self.out
        now = ctx.clock()
        hb = ctx.control.read_heartbeat(self.gen)
        heartbeat_age = None if hb is None else now - hb.time
        code = self._runtime_exit(heartbeat_age)
        if code is not None:
            # Its last words (a user error's traceback, a preemption's step) were written
            # before it exited, maybe after this poll's read of the events.
            self._events()
        check, new_look = self._look()
        obs = Observation(
            runtime_exit=code,
            health=check.health,
            heartbeat_age_s=heartbeat_age,
            running_for_s=now - self.started,
            user_error=self.user_error,
            user_error_step=self.user_error_step,
            user_error_site=self.user_error_site,
            user_error_repeats=self.user_error_repeats,
            failed_checks=self.failed_checks,
            nodes_short=self.nodes.short,
        )
        if confirm_health(obs):
            check = self._settled_health(check)
            now = ctx.clock()  # detected once the cluster's state is known
            obs = replace(obs, health=check.health, failed_checks=self.failed_checks)
        self.last_obs = obs
        failure = classify(obs, self.region, self.lease)
        if failure is None and new_look and health_glitch(obs, self.lease):
            self._glitch(check, obs)
        if failure is None and code == EXIT_OK:
            out.succeeded = True
            final = ctx.control.read_final(self.gen)
            out.final = None if final is None else final.as_dict()
            if final is not None and 0 <= final.final_step <= total_steps(ctx.cfg):
                # The cluster's word, unproven yet: never past the job's last step into an incident.
                out.last_step = final.final_step
            return True
        if failure is None:
            return False
        out.failure = failure
        out.detected_at = now
        fault_at = next((self.kill_times[k] for k in REGION_FAULTS if k in self.kill_times), None)
        fault_at = fault_at or self.injector.region_killed_at(self.cluster)
        out.failed_at = fault_at or (hb.time if hb else now)
        ctx.emit(
            FailureDetected(
                kind=str(failure.kind),
                region=self.region,
                detail=failure.detail,
                runtime_exit=code,
                cluster_healthy=obs.health is Health.UP,
                heartbeat_age_s=None if obs.heartbeat_age_s is None else round(obs.heartbeat_age_s, 3),
                detected_after_s=round(now - out.failed_at, 3),
                last_step=out.last_step,
                health=str(obs.health),
                failed_checks=obs.failed_checks,
            )
        )
        ctx.progress.note(failure_text(self.region, str(failure.kind), failure.detail))
        return True

    def _glitch(self, check: HealthCheck, obs: Observation) -> None:
        # A streak longer than the count that could lose the cluster says no more than
        # that count did: journaled up to it, so a long one does not flood the journal.
        if obs.failed_checks > self.lease.failures_to_lose:
            return
        self.ctx.emit(
            HealthGlitch(
                region=self.region,
                generation=self.gen,
                health=str(check.health),
                detail=check.detail or None,
                failed_checks=obs.failed_checks,
                heartbeat_age_s=None if obs.heartbeat_age_s is None else round(obs.heartbeat_age_s, 3),
            )
        )
        if obs.failed_checks == 1:
            self.ctx.progress.note(glitch_text(self.region, check.detail))
