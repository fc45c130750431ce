"""Watching one running attempt: the loop that reads, applies and acts.

Each wakeup lets the fault injector act and asks whether the runtime exited and how
the worker nodes are. Each look journals what the runtime reported, folds it into the
watch's state (``watchstate``: frozen, changed only by its pure ``apply``), then judges
the attempt (``watchstate.judge``, pure, over that state and the look) and does what the
verdict says; looks come less often while nothing happens (orchestrator/control/cadence.py).
A health check that is not UP while heartbeats are fresh is a glitch, journaled; a
connection to the runtime that ends without the runtime's word while heartbeats are
fresh is re-attached.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from orchestrator.chaos.drill import drill_fault
from orchestrator.chaos.injector import FaultInjector, Injected
from orchestrator.config.derived import total_steps
from orchestrator.control import watchstate as ws
from orchestrator.control.cadence import look_cap_ticks, next_look_ticks, quiet
from orchestrator.control.context import RunContext
from orchestrator.control.nodewatch import Loss, NodeWatch
from orchestrator.control.progress import chaos_text, failure_text, glitch_text, reattached_text, store_fallback_text
from orchestrator.control.stopreq import DRILL_NAME, take_request
from orchestrator.control.watchstate import step_after_report as step_after_report
from orchestrator.runstate.events import DrillRequested, IncidentRecorded, RuntimeReattached, RuntimeReport
from orchestrator.runstate.incidents import Incident
from orchestrator.runstate.losses import append_losses
from orchestrator.wire.faults import FaultKind
from orchestrator.wire.schema import Event
from providers.base import ClusterHandle, RuntimeProcess
from recovery.detection import HEALTH_SETTLE_S, Health, HealthCheck, Lease, Observation, confirm_health, may_reattach

POLL_S = 0.2  # between wakeups; a look every 1 to look_cap_ticks of them
ZOMBIE_SCAN_EVERY = 10  # looks
# A connection that keeps failing (a head unreachable over ssh) is tried again this often,
# while the heartbeat lease still vouches for the runtime.
REATTACH_EVERY_S = 1.0


class AttemptWatch:
    """Watches one attempt to its verdict; ``state`` is what it knows (its ``last_step``:
    the last step known done, moved by progress reports, faults and preemption notices),
    and at the end how the attempt ended."""

    def __init__(
        self,
        ctx: RunContext,
        injector: FaultInjector,
        cluster: ClusterHandle,
        proc: RuntimeProcess,
        *,
        generation: int,
        region: str,
        last_step: int = 0,
        restored_step: int | None = None,
        pending: Incident | None = None,
        tick: Callable[[], None] = lambda: None,
        on_look: Callable[[Observation, bool], None] = lambda obs, noticed: None,
        scan_zombies: Callable[[int], None] = lambda generation: None,
        journaled: frozenset[tuple[str, float]] = frozenset(),
    ) -> None:
        """``last_step``: what the attempt before knew done; ``restored_step``: the restore
        its stores were readied for; ``pending``: the incident it recovers from."""
        self.ctx = ctx
        self.injector = injector
        # Adopted from a crashed controller: what it journaled already is not journaled again.
        self.journaled = journaled
        self.tick = tick
        # Each look that leaves the attempt going, and whether a preemption notice was seen
        # (a hedge's signs: orchestrator/control/hedge.py).
        self.on_look = on_look
        self.scan_zombies = scan_zombies
        self.cluster = cluster
        self.proc = proc
        self.state = ws.start(generation, region, ctx.clock(), last_step, restored_step, pending)
        rec = ctx.cfg.recovery
        self.lease = Lease(
            rec.heartbeat_interval_s, rec.heartbeat_timeout_s, failures_to_lose=rec.health_failures_to_lose
        )
        self.nodes = NodeWatch(ctx, cluster, region, generation)
        # Every rank's pid as the group's last train_started said them (a kill_worker drill's victim).
        self.worker_pids: list[int] = []
        # The loop's own pacing: what the last look found, the looks so far, the next re-attach.
        self.seen: set[str] = set()
        self.looks = 0
        self.next_reattach_at = 0.0
        self.last_obs: Observation | None = None
        self.new_kinds: list[str] = []  # of the events the newest look found

    @property
    def gen(self) -> int:
        return self.state.generation

    @property
    def region(self) -> str:
        return self.state.region

    def _apply(self, happened: ws.Happened) -> None:
        self.state = ws.apply(self.state, happened)

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
                if self.state.health is Health.UP:
                    for loss in self.nodes.poll(self.state.last_step):
                        if loss.recorded:
                            self._apply(ws.IdleNodeLost())
                time.sleep(POLL_S)
        finally:
            self.nodes.close(failed=self.state.failure is not None)

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
        """Journal the runtime's new events and fold them in; their kinds."""
        with self.ctx.batch():  # one fsync for the look's lines
            return [self._event(ev) for ev in self.ctx.control.read_events(self.gen, self.seen)]

    def _event(self, ev: Event) -> str:
        ctx, kind = self.ctx, ev.kind
        if kind == "losses":
            # The plot's series: its own file, not the journal.
            points = [
                {"generation": self.gen, "region": self.region, "step": step, "loss": loss}
                for step, loss in ev.fields["points"]
            ]
            append_losses(ctx.run_dir, points)
            ctx.metrics.losses(ev.fields["points"], ev.time)
            return kind
        if (kind, ev.time) not in self.journaled:
            # Its own namespace, and "by" stamped last: whatever kind the runtime
            # claims, replay never reads it as a controller event.
            fields = {"region": self.region, **ev.fields, "time": ev.time, "generation": ev.generation}
            ctx.emit(RuntimeReport(kind=kind, fields={**fields, "by": "runtime"}))
        if kind == "train_started":
            self._train_started(ev)
        else:
            happened = ws.from_runtime(ev)
            if happened is not None:
                self._apply(happened)
        act = _ACTS.get(kind)
        if act is not None:
            act(self, ev)
        return kind

    def _train_started(self, ev: Event) -> None:
        """A (re)start of the worker group: folded with the node loss it may be owed to,
        then the node watch told the world and the nodes the group runs on now."""
        loss = self.nodes.unrecorded()
        happened = ws.from_runtime(ev, None if loss is None else _seen(loss))
        assert isinstance(happened, ws.TrainStarted)
        self._apply(happened)
        if loss is not None and self.state.train_starts > 1:
            loss.recorded = True  # its incident is open now
        self.nodes.world = self.state.world
        pids = ev.fields.get("worker_pids")
        self.worker_pids = [p for p in pids if isinstance(p, int)] if isinstance(pids, list) else []
        nodes = ev.fields.get("worker_nodes")  # validated by the wire's schema when present
        held = sorted(set(nodes)) if isinstance(nodes, list) and nodes else []
        self.nodes.world_nodes = frozenset(held) if held else None

    # --- what the controller does with a runtime event of some kinds, beyond folding it ----------
    def _on_replicated(self, ev: Event) -> None:
        if ev.get("lag_s") is not None:
            self.ctx.progress.replication_lag(float(ev.fields["lag_s"]))

    def _on_store_fallback(self, ev: Event) -> None:
        ctx = self.ctx
        if ev.fields["to"] in ctx.stores:
            # The runtime commits elsewhere now: replicate from there.
            ctx.replicator.follow(ctx.stores[str(ev.fields["to"])], list(ctx.stores.values()))
            ctx.progress.note(store_fallback_text(ev.get("from"), ev.get("to")))

    def _catch_up(self) -> None:
        self.new_kinds += self._events()

    def _progress(self) -> None:
        prog = self.ctx.control.read_progress(self.gen)
        if prog is None or prog.time == self.state.last_progress_at:
            return  # only a new report moves the step: a fault's step can be newer
        done = len(self.state.recorded)
        self._apply(ws.Progressed(prog.step, prog.time, prog.fields))
        for inc in self.state.recorded[done:]:
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
        injector, s = self.injector, self.state
        training_for = None if s.train_started_at is None else self.ctx.clock() - s.train_started_at
        # What the runtime reported before it asked for the fault is read first: a restart
        # it reported then is the previous fault's, and is recorded with that fault's time
        # and step before this one's replace them.
        fired = injector.poll(self.cluster, self.proc.pid, self.gen, before_fire=self._catch_up)
        fired += injector.timed(self.cluster, self.proc.pid, self.gen, training_for, self.state.last_step)
        fired += self._drill()
        for inj in fired:
            self._apply(ws.FaultFired(inj.kind, inj.at, inj.step))
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
        victim = None
        if fault is not None and fault.kind == FaultKind.kill_worker:
            # The last rank, as an at_step kill_worker strikes; its pid as the group said it.
            if self.worker_pids:
                victim = (len(self.worker_pids) - 1, self.worker_pids[-1])
            else:
                problem, fault = "no worker's pid is known yet: the group has not started training", None
        self.ctx.emit(DrillRequested(kind=kind, who=req.who(), region=self.region, refused=problem, source=req.source))
        if fault is None:
            return []
        return [self.injector.drill(fault, self.cluster, self.proc.pid, self.gen, self.state.last_step, victim)]

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
        """The health check, folded into the streak of failed ones; whether it is a new look."""
        check = self._health()
        new = check.at != self.state.last_look
        self._apply(ws.HealthLooked(check.at, check.health))
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
        """Look, judge (``watchstate.judge``), and do what the verdict says: True once the
        attempt has succeeded or failed (``state`` says which)."""
        ctx = self.ctx
        now = ctx.clock()
        hb = ctx.control.read_heartbeat(self.gen)
        heartbeat_age = None if hb is None else now - hb.time
        code = self._runtime_exit(heartbeat_age)
        if code is not None:
            # Its last words (a user error's traceback, a preemption's step) were written
            # before it exited, maybe after this poll's read of the events.
            self._events()
        check, new_look = self._look()
        obs = ws.observation(self.state, code, check.health, heartbeat_age, now, self.nodes.short)
        if confirm_health(obs):
            check = self._settled_health(check)
            now = ctx.clock()  # detected once the cluster's state is known
            obs = replace(obs, health=check.health, failed_checks=self.state.failed_checks)
        self.last_obs = obs
        verdict = ws.judge(
            self.state,
            obs,
            self.lease,
            now,
            new_look=new_look,
            heartbeat_at=None if hb is None else hb.time,
            killed_at=self.injector.region_killed_at(self.cluster),
        )
        if isinstance(verdict, ws.Going | ws.Done) and verdict.glitch:
            self._glitch(check, obs)
        if isinstance(verdict, ws.Going):
            self.on_look(obs, self.state.faults.preempt is not None)
            return False
        if isinstance(verdict, ws.Done):
            final = ctx.control.read_final(self.gen)
            self._apply(
                ws.FinalRead(
                    None if final is None else final.as_dict(),
                    None if final is None else final.final_step,
                    total_steps(ctx.cfg),
                )
            )
            return True
        self._apply(ws.FailureFound(verdict.failure, verdict.detected_at, verdict.failed_at))
        ctx.emit(ws.failure_event(self.state, verdict, obs))
        ctx.progress.note(failure_text(self.region, str(verdict.failure.kind), verdict.failure.detail))
        return True

    def _glitch(self, check: HealthCheck, obs: Observation) -> None:
        event = ws.glitch_event(self.state, check.health, check.detail, obs, self.lease)
        if event is None:
            return
        self.ctx.emit(event)
        if obs.failed_checks == 1:
            self.ctx.progress.note(glitch_text(self.region, check.detail))


def _seen(loss: Loss) -> ws.NodeLossSeen:
    return ws.NodeLossSeen(loss.node, loss.at, loss.last_step, loss.world_before, loss.replace_s)


# The runtime's event kinds the controller acts on, beyond journaling and folding them.
_ACTS: dict[str, Callable[[AttemptWatch, Event], None]] = {
    "replicated": AttemptWatch._on_replicated,
    "store_fallback": AttemptWatch._on_store_fallback,
}
