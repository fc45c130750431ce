"""The controller: one run's lifecycle, from the first region to SUCCEEDED or FAILED.

PENDING -> PROVISIONING -> RUNNING -> (RECOVERING -> PROVISIONING -> RUNNING)* -> SUCCEEDED | FAILED

Every transition and every observation that matters goes to the journal. The
decisions are the failure policy's; this module only watches and acts.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.chaos.proxy import FaultProxy
from orchestrator.config.derived import proxy_target, total_steps
from orchestrator.config.notify_targets import notify_from_env
from orchestrator.config.saved import refuse_credentials, saved_json
from orchestrator.config.schema import DISPLAY_KEYS, Config, NotifyConfig
from orchestrator.control.attempt import AttemptRunner
from orchestrator.control.cleanup import run_all
from orchestrator.control.context import RunContext, store_options
from orchestrator.control.controlstate import ControlState, GuardedProvider
from orchestrator.control.listeners import RunEvents
from orchestrator.control.outcome import AttemptOutcome
from orchestrator.control.progress import ProgressLine, decision_text, notify_failed_text, tensorboard_failed_text
from orchestrator.control.proof import (
    FUNC,
    FUNC_SEARCH,
    LOOP,
    PROVEN_KEYS,
    SEARCH,
    Proven,
    Unproven,
    newest_signed,
    prove,
)
from orchestrator.control.resume import Adoption
from orchestrator.control.standby import StandbyManager
from orchestrator.control.stopreq import StopRequest, StopWatch, clear_request
from orchestrator.metrics.board import NoMetrics, TensorBoardWriter, tensorboard_writer
from orchestrator.notify import secret as notify_secret
from orchestrator.notify.notifier import Notifier, shown
from orchestrator.runstate import rundir
from orchestrator.runstate.event_json import to_json
from orchestrator.runstate.events import (
    AttemptEnded,
    ControlInvalid,
    DecisionMade,
    Event,
    FailureDetected,
    FenceIgnored,
    FencesRead,
    IncidentOpened,
    IncidentRecorded,
    LeaseTaken,
    MultipartAborted,
    MultipartAbortFailed,
    NotifyFailed,
    NotifyOff,
    RegionSkipped,
    ReplicationError,
    RunFinished,
    RunKeyCreated,
    RunResumed,
    RunStarted,
    TensorBoardFailed,
    Transition,
)
from orchestrator.runstate.events import Replicated as ReplicatedEvent
from orchestrator.runstate.incidents import Incident
from orchestrator.runstate.journal import DamagedFile, Journal
from orchestrator.runstate.lifecycle import RunState, StateMachine
from orchestrator.runstate.objectives import judge
from orchestrator.runstate.result import RunRecord, read_result, record_from, withdraw_result, write_result
from orchestrator.runstate.rundir import make_control_dir, make_run_dir
from orchestrator.runstate.state import RunView, fold
from orchestrator.wire.codec import to_plain
from orchestrator.wire.control import ControlChannel, Invalid, run_control_url
from orchestrator.wire.faults import STORAGE_FAULTS
from providers.base import Capability, Provider
from recovery.controlkey import forget_key, read_key
from recovery.detection import Failure, FailureKind
from recovery.fencing import Lineage, first_generation
from recovery.fsio import write_private
from recovery.keys import controller_keys
from recovery.policy import Action, Budgets, Decision, FailurePolicy, History, passed_over
from recovery.replication import Replicated, Replicator
from recovery.signing import derive_state_key, derive_token_key, load_or_create_secret, secret_from_key
from recovery.store import CheckpointStore, StoreError, scan_fences

__all__ = ["Controller", "RunRecord"]


@dataclass
class Next:
    """What the controller's next step does: an attempt in ``region`` (or adopting
    ``adopt``), carrying the incident it recovers from, if any."""

    region: str
    pending: Incident | None = None
    adopt: Adoption | None = None


class Controller:
    def __init__(
        self,
        cfg: Config,
        provider: Provider,
        run_id: str,
        out: Any = None,
        clock: Any = time.time,
        control_key: bytes | None = None,
    ) -> None:
        """``control_key``: the user's key as the command read it, before it printed or wrote
        anything (recovery/controlkey.py, ``key_for``); None reads it from cfg.cloud.control_key
        here (an ``env:`` key already read reads as unset: the same None)."""
        self.cfg = cfg
        self.provider = provider
        self.run_id = run_id
        self.run_dir = rundir.run_path(cfg.home_path, run_id)
        make_run_dir(self.run_dir)
        # The run's secret stays in its folder (0600); attempts get the key derived from
        # it, which signs and checks manifests (recovery/signing.py). Resume reuses it.
        # With a control store and the user's control key, it is derived from that key,
        # so that another machine can take the run over (recovery/controlkey.py).
        if not cfg.cloud.control_store:
            control_key = None
            forget_key(cfg.cloud.control_key)
        elif control_key is None:
            control_key = read_key(cfg.cloud.control_key)
        derived = None if control_key is None else secret_from_key(control_key, run_id)
        secret, self.secret_created = load_or_create_secret(self.run_dir, derived)
        # The run's lease in the control store, before anything here acts: another
        # controller's (LeaseHeld) refuses this one (orchestrator/control/controlstate.py).
        self.state: ControlState | None = None
        self.lease_taken: LeaseTaken | None = None
        if cfg.cloud.control_store:
            self.state = ControlState(cfg, run_id, self.run_dir, derive_state_key(secret, run_id), out)
            self.lease_taken = self.state.take()
            provider = GuardedProvider(provider, self.state.guard)  # type: ignore[assignment]
            self.provider = provider
        try:
            self._build(cfg, provider, run_id, out, clock, secret)
        except BaseException:
            self.close()  # a lease taken for a controller that never ran is freed at once
            raise

    def _build(self, cfg: Config, provider: Provider, run_id: str, out: Any, clock: Any, secret: bytes) -> None:
        """The rest of the controller, once its lease (if any) is held."""
        # A stop asked of a controller that died before it read it is not this one's.
        clear_request(self.run_dir)
        if not cfg.cloud.control_store:
            make_control_dir(self.run_dir)
        self.journal = Journal(rundir.journal_path(self.run_dir))
        state = self.state
        self.events = RunEvents(
            self.journal,
            guard=None if state is None else state.guard,
            written=None if state is None else state.written,
        )
        # notify.* whole: a new run's as given (env:VARNAME read), a resumed one's taken back
        # from notify.secret; a target that file cannot give is off (notify_off, on resume).
        self.notify, self.notify_lost = notify_secret.load(self.run_dir, notify_from_env(cfg.notify))
        # Told every event emit() journals; delivers in the background (orchestrator/notify/notifier.py).
        self.notifier = Notifier(self.notify, run_id, cfg.job.name, failed=self._on_notify_failed)
        self.run_key = controller_keys(secret, run_id)
        # Remote clusters' Ray tokens come from the secret too, so a resumed controller has them.
        if Capability.TOKEN_KEY in provider.capabilities:
            provider.use_token_key(derive_token_key(secret, run_id))  # type: ignore[attr-defined]
        self.control = ControlChannel(
            control_url(cfg, run_id, self.run_dir),
            cfg.cloud.control_options,
            on_invalid=self._on_control_invalid,
            keys=self.run_key,
        )
        if self.state is not None:
            self.control.before_write = self.state.guard
        self.candidates = cfg.candidate_regions()
        self.proxies = start_proxies(cfg)
        self.stores = {
            r: CheckpointStore(
                cfg.cloud.regions[r].store,
                region=r,
                storage_options=store_options(cfg, self.proxies, r),
                key=self.run_key,
            )
            for r in self.candidates
        }
        self.policy = FailurePolicy(
            self.candidates,
            Budgets(
                max_failovers=cfg.recovery.max_failovers,
                max_restarts_on_errors=cfg.recovery.max_restarts_on_errors,
                region_cooldown_s=cfg.recovery.region_cooldown_s,
                max_preemptions=cfg.recovery.max_preemptions,
                too_small=too_small(cfg, self.candidates),
            ),
        )
        # Config validation leaves at least one candidate the run fits in.
        self.first_region = next(r for r in self.candidates if r not in self.policy.budgets.too_small)
        self.sm = StateMachine(self._on_transition)
        self.progress = ProgressLine(out or sys.stderr, enabled=cfg.progress)
        # Told every event emit() journals, and the watch's loss series and progress;
        # writes in the background (orchestrator/metrics/board.py).
        self.metrics: TensorBoardWriter | NoMetrics = (
            tensorboard_writer(self.run_dir, self._on_tensorboard_failed) if cfg.metrics.tensorboard else NoMetrics()
        )
        self.clock = clock
        self.started_at = clock()
        # Told every event emit() journals, in its order (orchestrator/control/listeners.py).
        self.events.listen("notifier", self.notifier.offer, self.notifier.close)
        self.events.listen("tensorboard", self.metrics.event, self.metrics.close)
        self.events.listen("progress", lambda event, _view: self.progress.event(event))
        # What the workload reported at the end (final.json), for result.json.
        self.final: dict[str, Any] | None = None
        self._generation = 0
        self._gen_lock = threading.Lock()
        self.replicator = Replicator(
            run_id,
            keep_last=cfg.checkpoint.keep_last,
            on_replicated=self._on_replicated,
            on_error=lambda msg: self.emit(ReplicationError(error=msg)),
            lineage=lambda: self.lineage,
        )
        self.ctx = RunContext(
            run_id=run_id,
            run_dir=self.run_dir,
            cfg=cfg,
            provider=provider,
            control=self.control,
            emit=self.emit,
            stores=self.stores,
            candidates=self.candidates,
            progress=self.progress,
            metrics=self.metrics,
            replicator=self.replicator,
            proxies=self.proxies,
            run_key=self.run_key,
            lineage=lambda: self.lineage,
            transition=self.sm.to,
            clock=clock,
            batch=self.journal.batch,
            owned=lambda: tuple(self.view.leftover),
            kept_runtimes=lambda: {name: to_json(p) for name, p in self.view.kept_runtimes.items()},
        )
        self.standby = StandbyManager(self.ctx, self._alloc_generation, lambda: self.history)
        self.runner = AttemptRunner(self.ctx, self.standby)
        self._next: Next | None = None
        self._at: tuple[str, int] | None = None  # the attempt in hand: (region, generation)

    def emit(self, event: Event) -> Event:
        """Journal ``event``, apply it to the run's state and tell the run's listeners
        (orchestrator/control/listeners.py): the one way anything the attempt, the watch or
        the standby did reaches the controller's state."""
        written = self.events.emit(event)
        with self._gen_lock:
            self._generation = max(self._generation, self.view.generation)
        return written

    @property
    def view(self) -> RunView:
        """The run's state: the journal folded (only emit() changes it)."""
        return self.events.view

    def _hold_run(self) -> None:
        """Journal the lease this controller took, then keep it and the mirror going."""
        if self.state is not None and self.lease_taken is not None:
            self.emit(self.lease_taken)
            for note in self.state.claim_notes():
                self.emit(note)
            self.state.emit = self.emit
            self.state.start()

    def close(self) -> None:
        """The controller is done with the run: its last mirror, its lease freed."""
        if self.state is not None:
            self.state.close()

    @property
    def lineage(self) -> Lineage:
        return self.view.lineage

    @property
    def history(self) -> History:
        return self.view.history

    @property
    def record(self) -> RunRecord:
        """result.json's input: a view of the run's state (and the workload's final report)."""
        return record_from(self.view, self.run_id, self.final, self.started_at)

    def _alloc_generation(self) -> int:
        # Monotonic across attempts and standbys: a standby that is never used burns its number.
        with self._gen_lock:
            self._generation += 1
            return self._generation

    # --- journal listeners ------------------------------------------------------
    def _on_control_invalid(self, invalid: Invalid) -> None:
        # Ignored, and said once: where and why, never the object (it may be huge, or a secret).
        self.emit(ControlInvalid(path=invalid.path, reason=invalid.reason))

    def _on_notify_failed(self, failed: NotifyFailed) -> None:
        self.emit(failed)
        self.progress.note(notify_failed_text(failed.target, failed.endpoint, failed.error))

    def _on_tensorboard_failed(self, error: str) -> None:
        self.emit(TensorBoardFailed(error=error))
        self.progress.note(tensorboard_failed_text(error))

    def _notify_off(self) -> None:
        """Say which notify targets notify.secret could not give: journaled, and one line each."""
        for lost in self.notify_lost:
            self.emit(NotifyOff(target=lost.target, reason=lost.reason, endpoint=lost.endpoint))
            print(
                f"warning: run {self.run_id}: notify.{lost.target} ({lost.endpoint}) is off: {lost.reason}",
                file=self.progress.stream,
                flush=True,
            )
        self.notify_lost = []

    def _on_transition(self, prev: RunState, new: RunState, info: dict[str, object]) -> None:
        self.emit(Transition(to=new, from_=prev, **info))  # type: ignore[arg-type]
        if new is RunState.RUNNING and isinstance(info.get("region"), str):
            self.standby.ensure(str(info["region"]))

    def _on_replicated(self, r: Replicated) -> None:
        self.emit(
            ReplicatedEvent(
                step=r.step,
                from_=r.source,
                to=r.target,
                lag_s=round(r.lag_s, 3),
                copy_s=round(r.copy_s, 3),
                bytes=r.bytes,
            )
        )
        self.progress.replication_lag(r.lag_s)

    # --- the run ------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        save_config(self.run_dir, cfg, self.notify)
        self.emit(
            RunStarted(
                run_id=self.run_id,
                pid=os.getpid(),
                host=socket.gethostname()[:100],
                # The webhook's URL and the command's arguments may hold a token: notify.secret
                # keeps them (for a resume), the journal only what shown() leaves.
                config={
                    **{k: v for k, v in to_plain(cfg).items() if k not in DISPLAY_KEYS},
                    "notify": shown(self.notify),
                },
                candidates=tuple(self.candidates),
            )
        )
        self._hold_run()
        self._notify_off()
        self._start_above_fences()
        for region in passed_over(self.candidates, "", self.first_region, self.policy.budgets.too_small):
            self.emit(RegionSkipped(region=region, reason=self.policy.budgets.too_small[region]))
        return self._drive(self.first_region, None)

    def resume(self) -> dict[str, Any]:
        """Pick the run up from its journal after the controller died (action=resume)."""
        from orchestrator.control.resume import cluster_gone, crash_incident, journaled_runtime_events, sweep_and_adopt
        from orchestrator.runstate.journal import read_typed
        from orchestrator.runstate.replay import replayed

        events = list(read_typed(self.journal.path))
        # The state the dead controller had: its journal, folded by the same apply.
        self.events.restore(fold(events))
        rp = replayed(self.view)
        self.started_at = rp.started_at or self.started_at
        with self._gen_lock:
            self._generation = self.view.generation
        self.sm.state = rp.state
        self._hold_run()
        if self.secret_created:
            # The secret was lost (or the run predates signing): its checkpoints cannot be trusted now.
            self.emit(
                RunKeyCreated(
                    reason="no run.secret in the run's folder: a new one was made; earlier checkpoints do not verify"
                )
            )
        self._notify_off()
        if not rp.state.terminal:
            self._start_above_fences()
        self.emit(
            RunResumed(
                pid=os.getpid(),
                host=socket.gethostname()[:100],
                state=rp.state,
                open_attempt=None if rp.open_attempt is None else rp.open_attempt.generation,
                leftover=tuple(sorted(rp.leftover)),
            )
        )
        if rp.state.terminal:
            return self._finish_terminal(rp)
        # Before the sweep tears it down: was the open attempt's cluster itself gone?
        gone = cluster_gone(self.ctx, rp.open_attempt)
        adopt = sweep_and_adopt(self.ctx, rp, may_adopt=rp.state is not RunState.INTERRUPTED)
        if adopt is not None:
            adopt = replace(adopt, journaled=journaled_runtime_events(events, adopt.generation))
        now = self.clock()
        op = rp.open_attempt
        progress = self.control.read_progress(op.generation) if op is not None else None
        last_step = max(rp.last_step, 0 if progress is None else progress.step)
        if rp.state is RunState.INTERRUPTED:
            if op is not None:
                # Interrupted mid-launch: that attempt never ended in the journal.
                self._end_open_attempt(op, now, last_step, "interrupted")
            withdraw_result(self.run_dir)
            return self._drive(self._resumed_region(rp), rp.pending)
        if op is not None and adopt is None:
            # The open attempt is gone (or was never up): end it, and start again in its region.
            self._end_open_attempt(op, now, last_step, "controller_lost")
            pending = rp.pending or crash_incident(rp, op.region, op.generation, now, last_step)
            to_region = op.region
            if rp.pending is None and gone is not None:
                # Its region went too while no controller ran: decided as the watch would have.
                to_region = self._decide_lost_region(op.region, gone, now)
                pending.to_region = to_region
            if rp.pending is None:
                self.emit(IncidentOpened(**pending.record()))  # type: ignore[arg-type]
            if self.sm.state in (RunState.RUNNING, RunState.PROVISIONING):
                self.sm.to(RunState.RECOVERING, failure="controller_lost", to_region=to_region)
            return self._drive(to_region, pending)
        region = rp.next_region if rp.state is RunState.RECOVERING and rp.next_region else self.first_region
        if adopt is not None:
            inc = crash_incident(rp, adopt.region, adopt.generation, now, last_step)
            inc.restored_step = last_step  # the attempt trained on: nothing to restore, nothing lost
            inc.first_step_at = now
            self.emit(IncidentRecorded(**inc.record()))  # type: ignore[arg-type]
            return self._drive(adopt.region, rp.pending, adopt)
        return self._drive(region, rp.pending)

    def _decide_lost_region(self, region: str, why: str, now: float) -> str:
        """The region a resumed run goes on in when the attempt it found had lost its cluster:
        the failure policy's choice for a lost cluster (its own region when the policy
        gives up on failing over: the run goes on where it was, as a resume always did)."""
        decision = self._decide(Failure(FailureKind.CLUSTER_LOST, region, f"found gone on resume: {why}"), now)
        return region if decision.action is Action.GIVE_UP or not decision.region else decision.region

    def _decide(self, failure: Failure, now: float) -> Decision:
        """The failure policy's decision on ``failure``: journaled, and its line shown."""
        decision = self.policy.make_decision(failure, self.history, now)
        self.emit(
            DecisionMade(
                action=decision.action,
                region=decision.region,
                reason=decision.reason,
                failure=failure.kind,
                failed_region=failure.region,
                signature=failure.signature or None,
            )
        )
        self.progress.note(decision_text(decision.action, decision.region))
        return decision

    def _end_open_attempt(self, op: Any, now: float, last_step: int, outcome: str) -> None:
        self.emit(
            AttemptEnded(
                generation=op.generation,
                region=op.region,
                started_at=op.started_at,
                ended_at=now,
                restored_step=op.restored_step,
                last_step=last_step,
                outcome=outcome,
            )
        )

    def _resumed_region(self, rp: Any) -> str:
        """Where an interrupted run goes on: the failover it was in the middle of, else the
        region it was interrupted in (while still a candidate), else the first candidate."""
        if rp.pending is not None and rp.next_region in self.candidates:
            return str(rp.next_region)
        at = self.view.current_region
        return at if at in self.candidates else self.first_region

    def _start_above_fences(self) -> None:
        """Raise the next generation above every fence the stores hold, before any attempt:
        one from an earlier life of this run_id, or one a crashed controller wrote and never
        journaled, must never be met by an equal or lower generation. Journaled, so a
        resume knows the floor even if those stores are unreachable then."""
        scan = scan_fences(list(self.stores.values()), self.run_id)
        floor = first_generation(self._generation, scan.generation)
        self.emit(
            FencesRead(
                generation_floor=floor,
                highest_fence=scan.generation,
                journaled=self._generation,
                failed=scan.failed,
            )
        )
        for region, reason in scan.ignored.items():
            self.emit(FenceIgnored(region=region, reason=reason[:500], by="controller"))

    def _finish_terminal(self, rp: Any) -> dict[str, Any]:
        """Died after the verdict: only the result is left to write."""
        last = rp.attempts[-1] if rp.attempts else {}
        gen = int(last.get("generation", rp.generation) or 0)
        final = self.control.read_final(gen) if rp.state is RunState.SUCCEEDED else None
        claims = None if final is None else final.as_dict()
        try:
            self.final = None if claims is None else self._prove(claims).apply(claims)
        except Unproven:
            # The verdict was proven before it was journaled; what cannot be proven now
            # (a store gone since) is left out rather than taken from the cluster's word.
            self.final = {k: v for k, v in (claims or {}).items() if k not in PROVEN_KEYS}
        self.replicator.stop(drain=False)
        result = write_result(self.run_dir, self.record, self.stores, self._judge)
        self._finished(result)
        return result

    def _prove(self, final: dict[str, Any] | None) -> Proven:
        """The run's end as its signed checkpoints show it (orchestrator/control/proof.py)."""
        cfg = self.cfg
        if cfg.hpo.enabled:
            mode = FUNC_SEARCH if cfg.job.train_func else SEARCH
        else:
            mode = FUNC if cfg.job.train_func else LOOP
        signed = newest_signed(self.stores.values(), self.run_id, self.lineage)
        return prove(mode, total_steps(cfg), final, signed)

    def _unproven(self, outcome: AttemptOutcome, region: str, reason: str) -> None:
        """An exit 0 whose outcome no signed checkpoint backs: a failure of the attempt."""
        outcome.succeeded = False
        outcome.failure = Failure(FailureKind.OUTCOME_UNPROVEN, region, f"its outcome does not verify: {reason}")
        # Found now: the incident's times are the controller's, not unset.
        outcome.detected_at = outcome.detected_at or self.clock()
        self.emit(
            FailureDetected(
                kind=str(FailureKind.OUTCOME_UNPROVEN),
                region=region,
                detail=outcome.failure.detail,
                runtime_exit=0,
                detected_after_s=0.0,
                last_step=outcome.last_step,
            )
        )

    def _finished(self, result: dict[str, Any]) -> None:
        """The run's last event, then its notification's delivery (bounded: notify.timeout_s)
        and the TensorBoard files' last records (bounded: metrics.CLOSE_S)."""
        try:
            self.emit(RunFinished(status=result["status"], final_step=result["final_step"]))
        finally:
            self.events.close()

    def _drive(self, region: str, pending: Incident | None, adopt: Adoption | None = None) -> dict[str, Any]:
        self.replicator.start()
        self._next = Next(region, pending, adopt)
        # action=stop's request reaches the loop as Ctrl-C does.
        stops = StopWatch(self.run_dir).start()
        try:
            try:
                while not self.step():
                    pass
            finally:
                try:
                    stops.disarm()
                except KeyboardInterrupt:
                    pass  # a stop asked for as the run ended: it has ended
        except KeyboardInterrupt:
            at_region, at_generation = self._at or (region, self._generation)
            self._interrupted(at_region, at_generation, stops.request)
        finally:
            run_all(
                [
                    self.standby.close,
                    lambda: self.runner.close(self._generation),
                    lambda: self.replicator.stop(drain=self.view.state is RunState.SUCCEEDED),
                    self._abort_orphaned_uploads,
                    self.progress.close,
                    *(proxy.stop for proxy in self.proxies.values()),
                ]
            )
        result = write_result(self.run_dir, self.record, self.stores, self._judge)
        self._finished(result)
        return result

    def _judge(self, result: dict[str, Any]) -> dict[str, Any] | None:
        """chaos.objectives on the run's result (``exact``: against a finished run's under home)."""
        o = self.cfg.chaos.objectives
        baseline = None
        if o.exact is not None:
            try:
                baseline = read_result(rundir.run_path(self.cfg.home_path, o.exact))
            except DamagedFile:
                baseline = None
        return judge(o.max_rto_s, o.max_lost_steps, o.exact, result, baseline)

    def step(self) -> bool:
        """One iteration of the control loop: run (or adopt) one attempt to its outcome,
        then apply the failure policy. True once the run has ended (SUCCEEDED or FAILED);
        otherwise the next step's region and open incident are set."""
        nxt = self._next
        assert nxt is not None, "step() before run() or resume()"
        region, pending = nxt.region, nxt.pending
        runner = self.runner
        if nxt.adopt is not None:
            generation = nxt.adopt.generation
            self._at = (region, generation)
            outcome = runner.adopt(nxt.adopt, pending)
        else:
            warm = self.standby.take(region) if pending is not None else None
            generation = warm.generation if warm is not None else self._alloc_generation()
            self._at = (region, generation)
            self.sm.to(RunState.PROVISIONING, region=region, generation=generation, standby=warm is not None)
            outcome = runner.run(region, generation, pending, warm)
        self._next = None
        if pending is not None and pending not in outcome.incidents:
            # This attempt failed before its first step: the incident stays open-ended.
            self.emit(IncidentRecorded(**pending.record()))  # type: ignore[arg-type]
        if outcome.succeeded:
            try:
                self.final = self._prove(outcome.final).apply(outcome.final)
            except Unproven as exc:
                self._unproven(outcome, region, str(exc))
            else:
                self.metrics.final(self.final)
                self.sm.to(RunState.SUCCEEDED, region=region, generation=generation)
                return True
        assert outcome.failure is not None
        failed = self._incident_for(outcome, region, generation)
        now = self.clock()
        decision = self._decide(outcome.failure, now)
        if decision.action is Action.GIVE_UP:
            self._fail(decision.reason, region, generation, failed)
            return True
        failed.to_region = decision.region
        self.emit(IncidentOpened(**failed.record()))  # type: ignore[arg-type]
        self.sm.to(RunState.RECOVERING, failure=str(outcome.failure.kind), to_region=decision.region)
        region = decision.region or region
        runner.journal_faults(runner.injector.at_point("failover", None, region, runner.last_step))
        self._next = Next(region, failed)
        return False

    def _abort_orphaned_uploads(self) -> None:
        """Every attempt and the replicator have stopped: a multipart upload still open
        under this run in any store (a replica's copy cut off, a fallback's upload) is
        one of ours that will never complete, billed and invisible until aborted."""
        for store in self.stores.values():
            try:
                aborted = store.abort_orphaned_uploads(self.run_id)
            except StoreError as exc:
                self.emit(MultipartAbortFailed(region=store.region, error=str(exc)))
                continue
            if aborted:
                self.emit(MultipartAborted(region=store.region, keys=tuple(aborted[:10])))

    def _incident_for(self, outcome: AttemptOutcome, region: str, generation: int) -> Incident:
        failure: Failure = outcome.failure  # type: ignore[assignment]
        return Incident(
            kind=str(failure.kind),
            from_region=region,
            to_region=None,
            failed_at=outcome.failed_at or outcome.detected_at,
            detected_at=outcome.detected_at,
            last_step=outcome.last_step,
            generation=generation,
        )

    def _interrupted(self, region: str, generation: int, request: StopRequest | None = None) -> None:
        """Ctrl-C, SIGTERM or action=stop: the run stops (its clusters are torn down on the
        way out) and waits for action=resume, which starts it again from its newest
        verified checkpoint. The journaled reason names who asked for a stop."""
        reason = INTERRUPTED_REASON if request is None else stopped_reason(request)
        end = RunState.CANCELLED if request is not None and request.action == "cancel" else RunState.INTERRUPTED
        if not self.sm.state.stopped:
            self.sm.to(end, reason=reason, region=region, generation=generation)

    def _fail(self, reason: str, region: str, generation: int, pending: Incident | None) -> None:
        if pending is not None:
            self.emit(IncidentRecorded(**pending.record()))  # type: ignore[arg-type]
        if not self.sm.state.terminal:
            self.sm.to(RunState.FAILED, reason=reason, region=region, generation=generation)


INTERRUPTED_REASON = "interrupted (SIGINT/SIGTERM): clusters torn down, checkpoints kept; action=resume goes on"


def stopped_reason(request: StopRequest) -> str:
    if request.action == "cancel":
        return f"cancelled by action=cancel ({request.who()}): clusters torn down, checkpoints kept; not resumable"
    return f"stopped by action=stop ({request.who()}): clusters torn down, checkpoints kept; action=resume goes on"


def too_small(cfg: Config, candidates: list[str]) -> dict[str, str]:
    """Candidate regions fewer workers fit in than trainer.min_workers, by why."""
    from orchestrator.config.derived import region_workers
    from recovery.elastic import world_size

    out = {}
    for name in candidates:
        rc = cfg.cloud.regions[name]
        fits = region_workers(rc, cfg.trainer)
        if world_size(fits, cfg.trainer.workers, cfg.trainer.min_workers) is None:
            out[name] = (
                f"{fits} worker(s) fit ({rc.node_count()} node(s) of {rc.num_cpus} CPUs), fewer than "
                f"{cfg.trainer.min_world()} (trainer.min_workers)"
            )
    return out


def control_url(cfg: Config, run_id: str, run_dir: str) -> str:
    return run_control_url(cfg.cloud.control_store, run_id, run_dir)


def save_config(run_dir: str, cfg: Config, notify: NotifyConfig | None = None) -> None:
    """The run's config, for action=resume (credentials are refused in configs, and checked
    once more here, before they would reach the disk). Its notify targets go whole to the
    run's notify.secret (0600), written first, and config.json names each by what may be
    shown of it (orchestrator/notify/secret.py). ``notify``: cfg.notify with env:VARNAME
    read (read here when not given)."""
    refuse_credentials(cfg, rundir.CONFIG_NAME)
    notify = notify_from_env(cfg.notify) if notify is None else notify
    notify_secret.save(run_dir, notify)
    write_private(rundir.config_path(run_dir), saved_json(cfg, notify_secret.kept(notify)))


def start_proxies(cfg: Config) -> dict[str, FaultProxy]:
    """A fault proxy in front of each object store, when a storage fault is configured."""
    if not any(f.kind in STORAGE_FAULTS for f in cfg.chaos.faults):
        return {}
    proxies = {}
    for region in cfg.candidate_regions():
        target = proxy_target(cfg.cloud.regions[region])
        if target is not None:
            proxies[region] = FaultProxy(*target).start()
    return proxies
