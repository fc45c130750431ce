"""The controller: one run's lifecycle, from the first region to SUCCEEDED or FAILED.

PENDING -> PROVISIONING -> RUNNING -> (RECOVERING -> PROVISIONING -> RUNNING)* -> SUCCEEDED | FAILED

It is handed its collaborators (``wiring`` builds them from the config; a test, fakes):
the run's events (the journal, the run's folded state, the listeners), the context the
parts of the loop share, the failure policy and the attempt runner. It keeps no state of
its own: where the run is (its lifecycle, the region and the incident the next step
recovers in, the attempt in hand) is the journal folded (``RunEvents.view``), and a step
moves it only by journaling what happened. The decisions are the failure policy's (and,
on a resume, the resume plan's); this module only watches and acts.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.config.derived import total_steps
from orchestrator.config.notify_targets import notify_from_env
from orchestrator.config.saved import refuse_credentials, saved_json
from orchestrator.config.schema import DISPLAY_KEYS, Config, NotifyConfig
from orchestrator.control.attempt import AttemptRunner
from orchestrator.control.cleanup import run_all
from orchestrator.control.context import RunContext
from orchestrator.control.controlstate import ControlState
from orchestrator.control.listeners import RunEvents
from orchestrator.control.outcome import AttemptOutcome
from orchestrator.control.progress import decision_text
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
from orchestrator.control.resume import (
    CONTROLLER_LOST,
    Adopt,
    Finish,
    Found,
    Outcome,
    Recover,
    Restart,
    look,
    plan,
    sweep,
)
from orchestrator.control.standby import Standby
from orchestrator.control.stopreq import StopRequest, StopWatch
from orchestrator.notify import secret as notify_secret
from orchestrator.notify.notifier import shown
from orchestrator.runstate import rundir
from orchestrator.runstate.events import (
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
    NotifyOff,
    Placed,
    RegionSkipped,
    RunFinished,
    RunKeyCreated,
    RunResumed,
    RunStarted,
)
from orchestrator.runstate.incidents import Incident
from orchestrator.runstate.journal import DamagedFile, Journal, read_typed
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.objectives import judge
from orchestrator.runstate.replay import incident_from
from orchestrator.runstate.result import RunRecord, read_result, record_from, withdraw_result, write_result
from orchestrator.runstate.state import RunView, fold
from orchestrator.wire.codec import to_plain
from orchestrator.wire.control import ControlChannel
from providers.base import Provider
from recovery.detection import Failure, FailureKind
from recovery.fencing import Lineage, first_generation
from recovery.fsio import write_private
from recovery.keys import AttemptKeys
from recovery.policy import Action, Decision, FailurePolicy, History, passed_over
from recovery.store import CheckpointStore, StoreError, scan_fences

__all__ = ["Controller", "Launch", "RunRecord", "next_step"]


@dataclass(frozen=True)
class Launch:
    """A step that starts an attempt in ``region``, recovering from ``pending`` (None:
    nothing failed). The other kind of step, a resume's ``Adopt``, watches one that runs."""

    region: str
    pending: Incident | None = None


Step = Launch | Adopt


def next_step(view: RunView, first_region: str) -> Launch | None:
    """The step the run's state calls for: the first region for a run not started yet, the
    region the policy chose for the incident being recovered from; None when nothing
    follows (the run ended, or was stopped: a resume's plan says where it goes on)."""
    if view.state is RunState.PENDING:
        return Launch(first_region)
    if view.state is RunState.RECOVERING and view.next_region is not None:
        return Launch(view.next_region, None if view.pending is None else incident_from(view.pending))
    return None


class Controller:
    def __init__(
        self,
        ctx: RunContext,
        events: RunEvents,
        policy: FailurePolicy,
        runner: AttemptRunner,
        *,
        hold: ControlState | None = None,
        lease_taken: LeaseTaken | None = None,
        notify: NotifyConfig | None = None,
        notify_lost: Sequence[notify_secret.Lost] = (),
        secret_created: bool = False,
    ) -> None:
        """``ctx``: what the parts of the loop share (its ``emit`` is ``events.emit``);
        ``policy``: what follows a failure; ``runner``: one attempt at a time, with the
        warm standby if the run has one. ``hold``: the run's lease and mirror in the
        control store, taken (``lease_taken``) before anything here acts; ``notify``: the
        run's notify targets as resolved (config.json keeps them by name), and those its
        notify.secret could not give (``notify_lost``); ``secret_created``: the run's
        secret was made now, not found."""
        self.ctx = ctx
        self.events = events
        self.policy = policy
        self.runner = runner
        self.hold = hold
        self.lease_taken = lease_taken
        self.notify = ctx.cfg.notify if notify is None else notify
        self.notify_lost = list(notify_lost)
        self.secret_created = secret_created
        self.started_at = ctx.clock()
        # What the workload reported at the end (final.json), for result.json.
        self.final: dict[str, Any] | None = None

    # --- what it was handed -------------------------------------------------------
    @property
    def cfg(self) -> Config:
        return self.ctx.cfg

    @property
    def run_id(self) -> str:
        return self.ctx.run_id

    @property
    def run_dir(self) -> str:
        return self.ctx.run_dir

    @property
    def provider(self) -> Provider:
        return self.ctx.provider

    @property
    def control(self) -> ControlChannel:
        return self.ctx.control

    @property
    def stores(self) -> dict[str, CheckpointStore]:
        return self.ctx.stores

    @property
    def candidates(self) -> list[str]:
        return self.ctx.candidates

    @property
    def run_key(self) -> AttemptKeys | None:
        return self.ctx.run_key

    @property
    def journal(self) -> Journal:
        return self.events.journal

    @property
    def progress(self) -> Any:
        return self.ctx.progress

    @property
    def metrics(self) -> Any:
        return self.ctx.metrics

    @property
    def standby(self) -> Standby | None:
        return self.runner.standby

    @property
    def clock(self) -> Any:
        return self.ctx.clock

    @property
    def first_region(self) -> str:
        # Config validation leaves at least one candidate the run fits in. With
        # recovery.placement=cost, the one placed when the run started (journaled).
        placed = self.view.placed_region
        if placed is not None and placed in self.policy.candidates:
            return placed
        return next(r for r in self.policy.candidates if r not in self.policy.budgets.too_small)

    # --- where the run is: its journal, folded ----------------------------------------
    @property
    def view(self) -> RunView:
        """The run's state: the journal folded (only emit() changes it)."""
        return self.events.view

    @property
    def lineage(self) -> Lineage:
        return self.view.lineage

    @property
    def history(self) -> History:
        return self.view.history

    @property
    def generation(self) -> int:
        """The highest generation the run has named or handed out."""
        return self.events.generation

    @property
    def record(self) -> RunRecord:
        """result.json's input: a view of the run's state (and the workload's final report)."""
        return record_from(self.view, self.run_id, self.final, self.started_at)

    def next_step(self) -> Launch | None:
        return next_step(self.view, self.first_region)

    def emit(self, event: Event) -> Event:
        """Journal ``event``, apply it to the run's state and tell the run's listeners: the
        one way anything the attempt, the watch or the standby did reaches the run's state."""
        return self.events.emit(event)

    def _hold_run(self) -> None:
        """Journal the lease this controller took, then keep it and the mirror going."""
        if self.hold is not None and self.lease_taken is not None:
            self.emit(self.lease_taken)
            for note in self.hold.claim_notes():
                self.emit(note)
            self.hold.emit = self.emit
            self.hold.start()

    def close(self) -> None:
        """The controller is done with the run: its last mirror, its lease freed."""
        if self.hold is not None:
            self.hold.close()

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
        too_small = self.policy.budgets.too_small
        region, placement = self.policy.first_placement()
        if placement is not None:
            self.emit(Placed(region=region, placement=placement))
        for skipped in passed_over(self.candidates, "", region, too_small):
            self.emit(RegionSkipped(region=skipped, reason=too_small[skipped]))
        return self._drive(Launch(self.first_region))

    def resume(self, said: Sequence[Event] = ()) -> dict[str, Any]:
        """Pick the run up from its journal after its controller died or was stopped
        (action=resume), on its own machine or on one that took it over from the control
        store's mirror: ``said``, journaled first, is what this controller has to say of
        how it came to the run (a takeover's mirror_restored, a supervisor's restart)."""
        for event in said:
            self.emit(event)
        journal = list(read_typed(self.journal.path))
        # The state the dead controller left: its journal, folded by the same apply.
        left = fold(journal)
        self.events.restore(left)
        self.started_at = left.started_at or self.started_at
        self._hold_run()
        if self.secret_created:
            # The secret was lost (or the run predates signing): its checkpoints cannot be trusted now.
            self.emit(
                RunKeyCreated(
                    reason="no run.secret in the run's folder: a new one was made; earlier checkpoints do not verify"
                )
            )
        self._notify_off()
        if not left.state.terminal:
            self._start_above_fences()
        op = left.open_attempt
        self.emit(
            RunResumed(
                pid=os.getpid(),
                host=socket.gethostname()[:100],
                state=left.state,
                open_attempt=None if op is None else op.generation,
                leftover=tuple(sorted(left.leftover)),
            )
        )
        # A run that had its verdict looks at nothing: only its result is left to write.
        found = Found(now=self.clock()) if left.state.terminal else look(self.ctx, left, journal, self.clock)
        return self.carry_out(plan(left, found, self.candidates, self.first_region, self._decision))

    def carry_out(self, outcome: Outcome) -> dict[str, Any]:
        """A resume's plan, carried out: the one place each of its outcomes acts."""
        if isinstance(outcome, Finish):
            return self._finish_terminal(outcome)
        # Nothing may train beside what comes next: all but an adopted attempt goes.
        sweep(self.ctx, self.view, keep=outcome.adoption.cluster if isinstance(outcome, Adopt) else None)
        if isinstance(outcome, Restart):
            if outcome.ended is not None:
                self.emit(outcome.ended)  # a stop caught its launch: that attempt never ended in the journal
            if outcome.stopped:
                withdraw_result(self.run_dir)
            return self._drive(Launch(outcome.region, outcome.pending))
        if isinstance(outcome, Recover):
            self.emit(outcome.ended)
            if outcome.decided is not None:
                self._journal_decision(*outcome.decided)
            if outcome.opened:
                self.emit(IncidentOpened(**outcome.incident.record()))  # type: ignore[arg-type]
            if outcome.recovering:
                self.events.to(RunState.RECOVERING, failure=CONTROLLER_LOST, to_region=outcome.region)
            return self._drive(Launch(outcome.region, outcome.incident))
        self.emit(IncidentRecorded(**outcome.crash.record()))  # type: ignore[arg-type]
        return self._drive(outcome)

    def _decision(self, failure: Failure, now: float) -> Decision:
        """The failure policy's decision on ``failure``, with the run's history (pure)."""
        return self.policy.make_decision(failure, self.history, now)

    def _decide(self, failure: Failure, now: float) -> Decision:
        """The failure policy's decision on ``failure``: journaled, and its line shown."""
        decision = self._decision(failure, now)
        self._journal_decision(failure, decision)
        return decision

    def _journal_decision(self, failure: Failure, decision: Decision) -> None:
        self.emit(
            DecisionMade(
                action=decision.action,
                region=decision.region,
                reason=decision.reason,
                failure=failure.kind,
                failed_region=failure.region,
                signature=failure.signature or None,
                placement=decision.placement,
            )
        )
        self.progress.note(decision_text(decision.action, decision.region, decision.placement))

    def _start_above_fences(self) -> None:
        """Raise the next generation above every fence the stores hold, before any attempt:
        one from an earlier life of this run_id, or one a crashed controller wrote and never
        journaled, must never be met by an equal or lower generation. Journaled, so a
        resume knows the floor even if those stores are unreachable then."""
        scan = scan_fences(list(self.stores.values()), self.run_id)
        journaled = self.generation
        floor = first_generation(journaled, scan.generation)
        self.emit(
            FencesRead(
                generation_floor=floor,
                highest_fence=scan.generation,
                journaled=journaled,
                failed=scan.failed,
            )
        )
        for region, reason in scan.ignored.items():
            self.emit(FenceIgnored(region=region, reason=reason[:500], by="controller"))

    def _finish_terminal(self, outcome: Finish) -> dict[str, Any]:
        """Died after the verdict: only the result is left to write."""
        final = self.control.read_final(outcome.generation) if outcome.succeeded else None
        claims = None if final is None else final.as_dict()
        try:
            self.final = None if claims is None else self._prove(claims).apply(claims)
        except Unproven:
            # The verdict was proven before it was journaled; what cannot be proven now
            # (a store gone since) is left out rather than taken from the cluster's word.
            self.final = {k: v for k, v in (claims or {}).items() if k not in PROVEN_KEYS}
        self.ctx.replicator.stop(drain=False)
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

    def _unproven(self, outcome: AttemptOutcome, region: str, reason: str) -> AttemptOutcome:
        """An exit 0 whose outcome no signed checkpoint backs: a failure of the attempt."""
        failure = Failure(FailureKind.OUTCOME_UNPROVEN, region, f"its outcome does not verify: {reason}")
        # Found now: the incident's times are the controller's, not unset.
        outcome = replace(outcome, succeeded=False, failure=failure, detected_at=outcome.detected_at or self.clock())
        self.emit(
            FailureDetected(
                kind=str(FailureKind.OUTCOME_UNPROVEN),
                region=region,
                detail=failure.detail,
                runtime_exit=0,
                detected_after_s=0.0,
                last_step=outcome.last_step,
            )
        )
        return outcome

    def _finished(self, result: dict[str, Any]) -> None:
        """The run's last event, then each listener's close: the notifications' delivery
        (bounded: notify.timeout_s), the TensorBoard files' last records (bounded: metrics.CLOSE_S)."""
        try:
            self.emit(RunFinished(status=result["status"], final_step=result["final_step"]))
        finally:
            self.events.close()

    def _drive(self, first: Step) -> dict[str, Any]:
        self.ctx.replicator.start()
        # action=stop's request reaches the loop as Ctrl-C does.
        stops = StopWatch(self.run_dir).start()
        try:
            try:
                step: Step | None = first
                while not self.step(step):
                    step = None  # from here on, the run's state says
            finally:
                try:
                    stops.disarm()
                except KeyboardInterrupt:
                    pass  # a stop asked for as the run ended: it has ended
        except KeyboardInterrupt:
            region, generation = self.view.holding or (first.region, self.generation)
            self._interrupted(region, generation, stops.request)
        finally:
            standby = self.standby
            run_all(
                [
                    *([standby.close] if standby is not None else []),
                    lambda: self.runner.close(self.generation),
                    lambda: self.ctx.replicator.stop(drain=self.view.state is RunState.SUCCEEDED),
                    self._abort_orphaned_uploads,
                    self.progress.close,
                    *(proxy.stop for proxy in self.ctx.proxies.values()),
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

    def step(self, todo: Step | None = None) -> bool:
        """One iteration of the control loop: run (or adopt) one attempt to its outcome,
        then apply the failure policy. ``todo``: what to do (None: what the run's state
        calls for, ``next_step``). True once the run has ended (SUCCEEDED or FAILED);
        otherwise its state says where the next step goes."""
        todo = todo or self.next_step()
        assert todo is not None, "step() with nothing to do: the run has not started, or has ended"
        runner, pending = self.runner, todo.pending
        if isinstance(todo, Adopt):
            region, generation = todo.region, todo.adoption.generation
            outcome = runner.adopt(todo.adoption, pending)
        else:
            region = todo.region
            standby = self.standby
            warm = standby.take(region) if standby is not None and pending is not None else None
            generation = warm.generation if warm is not None else self.events.next_generation()
            self.events.to(RunState.PROVISIONING, region=region, generation=generation, standby=warm is not None)
            outcome = runner.run(region, generation, pending, warm)
        if outcome.pending is not None and not outcome.pending_recorded:
            # This attempt failed before its first step: the incident stays open-ended.
            self.emit(IncidentRecorded(**outcome.pending.record()))  # type: ignore[arg-type]
        if outcome.succeeded:
            try:
                self.final = self._prove(outcome.final).apply(outcome.final)
            except Unproven as exc:
                outcome = self._unproven(outcome, region, str(exc))
            else:
                self.metrics.final(self.final)
                self.events.to(RunState.SUCCEEDED, region=region, generation=generation)
                return True
        assert outcome.failure is not None
        failed = incident_for(outcome, region, generation)
        decision = self._decide(outcome.failure, self.clock())
        if decision.action is Action.GIVE_UP:
            self._fail(decision.reason, region, generation, failed)
            return True
        failed = replace(failed, to_region=decision.region)
        self.emit(IncidentOpened(**failed.record()))  # type: ignore[arg-type]
        # The fault injector's failover point is a listener of this transition (wiring).
        self.events.to(RunState.RECOVERING, failure=str(outcome.failure.kind), to_region=decision.region)
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

    def _interrupted(self, region: str, generation: int, request: StopRequest | None = None) -> None:
        """Ctrl-C, SIGTERM or action=stop: the run stops (its clusters are torn down on the
        way out) and waits for action=resume, which starts it again from its newest
        verified checkpoint. The journaled reason names who asked for a stop."""
        reason = INTERRUPTED_REASON if request is None else stopped_reason(request)
        end = RunState.CANCELLED if request is not None and request.action == "cancel" else RunState.INTERRUPTED
        if not self.view.state.stopped:
            asked = {} if request is None else {"source": request.source}
            self.events.to(end, reason=reason, region=region, generation=generation, **asked)

    def _fail(self, reason: str, region: str, generation: int, pending: Incident | None) -> None:
        if pending is not None:
            self.emit(IncidentRecorded(**pending.record()))  # type: ignore[arg-type]
        if not self.view.state.terminal:
            self.events.to(RunState.FAILED, reason=reason, region=region, generation=generation)


def incident_for(outcome: AttemptOutcome, region: str, generation: int) -> Incident:
    """The incident a failed attempt opens: its failure, dated as the watch found it."""
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


INTERRUPTED_REASON = "interrupted (SIGINT/SIGTERM): clusters torn down, checkpoints kept; action=resume goes on"


def stopped_reason(request: StopRequest) -> str:
    # The console's request names the console: its page is where the user looks for who stopped it.
    who = request.who() + {"console": ", from the console", "python": ", from Python"}.get(request.source, "")
    if request.action == "cancel":
        return f"cancelled by action=cancel ({who}): clusters torn down, checkpoints kept; not resumable"
    return f"stopped by action=stop ({who}): clusters torn down, checkpoints kept; action=resume goes on"


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
