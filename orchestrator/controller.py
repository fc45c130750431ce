"""The controller: one run's lifecycle, from the first region to SUCCEEDED or FAILED.

PENDING -> PROVISIONING -> RUNNING -> (RECOVERING -> PROVISIONING -> RUNNING)* -> SUCCEEDED | FAILED

Every transition and every observation that matters goes to the journal. The
decisions are the failure policy's; this module only watches and acts.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from orchestrator.attempt import AttemptOutcome, AttemptRunner
from orchestrator.chaos.proxy import FaultProxy
from orchestrator.cleanup import run_all
from orchestrator.config import STORAGE_FAULTS, Config, proxy_target, to_plain
from orchestrator.incidents import Incident
from orchestrator.journal import Journal
from orchestrator.progress import ProgressLine
from orchestrator.result import write_result
from orchestrator.rundir import make_control_dir, make_run_dir
from orchestrator.standby import StandbyManager
from orchestrator.states import RunState, StateMachine
from orchestrator.wire.control import ControlChannel, Invalid, run_control_url
from providers.base import Provider
from recovery.detection import Failure
from recovery.fencing import Lineage, first_generation
from recovery.fsio import write_private
from recovery.policy import Action, Budgets, FailurePolicy, History
from recovery.replication import Replicated, Replicator
from recovery.signing import derive_run_key, derive_token_key, load_or_create_secret
from recovery.store import CheckpointStore, StoreError, scan_fences


@dataclass
class RunRecord:
    """What the controller knows so far; result.json is made from it."""

    run_id: str
    started_at: float
    status: str = "RUNNING"
    reason: str = ""
    attempts: list[dict[str, Any]] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    final: dict[str, Any] | None = None
    region: str | None = None
    # The workload's own traceback, when a user error ended an attempt.
    error_traceback: str | None = None


class Controller:
    def __init__(self, cfg: Config, provider: Provider, run_id: str, out: Any = None) -> None:
        self.cfg = cfg
        self.provider = provider
        self.run_id = run_id
        self.run_dir = os.path.join(cfg.home_path, "runs", run_id)
        make_run_dir(self.run_dir)
        if not cfg.cloud.control_store:
            make_control_dir(self.run_dir)
        self.journal = Journal(os.path.join(self.run_dir, "journal.jsonl"))
        # The run's secret stays in its folder (0600); attempts get the key derived from
        # it, which signs and checks manifests (recovery/signing.py). Resume reuses it.
        secret, self.secret_created = load_or_create_secret(self.run_dir)
        self.run_key = derive_run_key(secret, run_id)
        # Remote clusters' Ray tokens come from the secret too, so a resumed controller has them.
        use_token_key = getattr(provider, "use_token_key", None)
        if callable(use_token_key):
            use_token_key(derive_token_key(secret, run_id))
        self.control = ControlChannel(
            control_url(cfg, run_id, self.run_dir), cfg.cloud.control_options, on_invalid=self._on_control_invalid
        )
        self.candidates = cfg.candidate_regions()
        self.proxies = start_proxies(cfg)
        self.stores = {
            r: CheckpointStore(
                cfg.cloud.regions[r].store, region=r, storage_options=self.store_options(r), key=self.run_key
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
            ),
        )
        self.sm = StateMachine(self._on_transition)
        self.progress = ProgressLine(out or sys.stderr, enabled=cfg.progress)
        self.record = RunRecord(run_id=run_id, started_at=time.time())
        self.history = History()
        self.lineage = Lineage()
        self._generation = 0
        self._gen_lock = threading.Lock()
        self.standby = StandbyManager(self, self._alloc_generation)
        self.replicator = Replicator(
            run_id,
            keep_last=cfg.checkpoint.keep_last,
            on_replicated=self._on_replicated,
            on_error=lambda msg: self.journal.append("replication_error", error=msg),
            lineage=lambda: self.lineage,
        )

    def store_options(self, region: str) -> dict[str, Any]:
        """A region's storage options as everyone uses them: through its fault proxy, if any."""
        opts = dict(self.cfg.cloud.regions[region].storage_options)
        if region in self.proxies:
            opts["endpoint_url"] = self.proxies[region].endpoint
        return opts

    def _alloc_generation(self) -> int:
        # Monotonic across attempts and standbys: a standby that is never used burns its number.
        with self._gen_lock:
            self._generation += 1
            return self._generation

    # --- journal listeners ------------------------------------------------------
    def _on_control_invalid(self, invalid: Invalid) -> None:
        # Ignored, and said once: where and why, never the object (it may be huge, or a secret).
        self.journal.append("control_invalid", path=invalid.path, reason=invalid.reason)

    def _on_transition(self, prev: RunState, new: RunState, info: dict[str, object]) -> None:
        self.journal.append("transition", **{"from": str(prev), "to": str(new)}, **info)

    def _on_replicated(self, r: Replicated) -> None:
        self.journal.append(
            "replicated",
            step=r.step,
            **{"from": r.source, "to": r.target},
            lag_s=round(r.lag_s, 3),
            copy_s=round(r.copy_s, 3),
            bytes=r.bytes,
        )
        self.progress.replication_lag(r.lag_s)

    def cluster_name(self, region: str, generation: int) -> str:
        return f"{self.run_id}-{region}-g{generation}"

    # --- the run ------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        save_config(self.run_dir, cfg)
        self.journal.append(
            "run_started",
            run_id=self.run_id,
            pid=os.getpid(),
            config={k: v for k, v in to_plain(cfg).items() if k != "progress"},
            candidates=self.candidates,
        )
        self._start_above_fences()
        return self._drive(self.candidates[0], None)

    def resume(self) -> dict[str, Any]:
        """Pick the run up from its journal after the controller died (action=resume)."""
        from orchestrator.replay import replay
        from orchestrator.resume import crash_incident, sweep_and_adopt

        rp = replay(self.journal.events())
        self.record.started_at = rp.started_at or self.record.started_at
        self.record.attempts = list(rp.attempts)
        self.record.incidents = list(rp.incidents)
        self._generation = rp.generation
        self.lineage = rp.lineage
        self.history = rp.history
        self.sm.state = rp.state
        if self.secret_created:
            # The secret was lost (or the run predates signing): its checkpoints cannot be trusted now.
            self.journal.append(
                "run_key_created",
                reason="no run.secret in the run's folder: a new one was made; earlier checkpoints do not verify",
            )
        if not rp.state.terminal:
            self._start_above_fences()
        self.journal.append(
            "run_resumed",
            pid=os.getpid(),
            state=str(rp.state),
            open_attempt=None if rp.open_attempt is None else rp.open_attempt.generation,
            leftover=sorted(rp.leftover),
        )
        if rp.state.terminal:
            return self._finish_terminal(rp)
        adopt = sweep_and_adopt(self, rp)
        now = time.time()
        op = rp.open_attempt
        progress = self.control.read_progress(op.generation) if op is not None else None
        last_step = max(rp.last_step, 0 if progress is None else progress.step)
        if op is not None and adopt is None:
            # The open attempt is gone (or was never up): end it, and start again in its region.
            self.journal.append(
                "attempt_ended",
                generation=op.generation,
                region=op.region,
                started_at=op.started_at,
                ended_at=now,
                restored_step=op.restored_step,
                last_step=last_step,
                outcome="controller_lost",
            )
            self.record.attempts.append(
                {"generation": op.generation, "region": op.region, "outcome": "controller_lost"}
            )
            pending = rp.pending or crash_incident(rp, op.region, op.generation, now, last_step)
            if rp.pending is None:
                self.journal.append("incident_opened", **pending.record())
            if self.sm.state in (RunState.RUNNING, RunState.PROVISIONING):
                self.sm.to(RunState.RECOVERING, failure="controller_lost", to_region=op.region)
            return self._drive(op.region, pending)
        region = rp.next_region if rp.state is RunState.RECOVERING and rp.next_region else self.candidates[0]
        if adopt is not None:
            inc = crash_incident(rp, adopt.region, adopt.generation, now, last_step)
            inc.restored_step = last_step  # the attempt trained on: nothing to restore, nothing lost
            inc.first_step_at = now
            self.record.incidents.append(inc)
            self.journal.append("incident", **inc.record())
            return self._drive(adopt.region, rp.pending, adopt)
        return self._drive(region, rp.pending)

    def _start_above_fences(self) -> None:
        """Raise the next generation above every fence the stores hold, before any attempt:
        one from an earlier life of this run_id, or one a crashed controller wrote and never
        journaled, must never be met by an equal or lower generation. Journaled, so a
        resume knows the floor even if those stores are unreachable then."""
        scan = scan_fences(list(self.stores.values()), self.run_id)
        floor = first_generation(self._generation, scan.generation)
        self.journal.append(
            "fences_read",
            generation_floor=floor,
            highest_fence=scan.generation,
            journaled=self._generation,
            failed=scan.failed,
        )
        self._generation = floor

    def _finish_terminal(self, rp: Any) -> dict[str, Any]:
        """Died after the verdict: only the result is left to write."""
        last = rp.attempts[-1] if rp.attempts else {}
        gen = int(last.get("generation", rp.generation) or 0)
        self.record.status = str(rp.state)
        self.record.region = last.get("region")
        final = self.control.read_final(gen) if rp.state is RunState.SUCCEEDED else None
        self.record.final = None if final is None else final.as_dict()
        self.replicator.stop(drain=False)
        result = write_result(self.run_dir, self.record, self.stores)
        self.journal.append("run_finished", status=result["status"], final_step=result["final_step"])
        return result

    def _drive(self, region: str, pending: Incident | None, adopt: Any = None) -> dict[str, Any]:
        self.replicator.start()
        generation = self._generation
        runner = AttemptRunner(self)
        self.standby.runner = runner
        try:
            while True:
                if adopt is not None:
                    generation = adopt.generation
                    outcome = runner.adopt(adopt, pending)
                    adopt = None
                else:
                    warm = self.standby.take(region) if pending is not None else None
                    generation = warm.generation if warm is not None else self._alloc_generation()
                    self.sm.to(RunState.PROVISIONING, region=region, generation=generation, standby=warm is not None)
                    outcome = runner.run(region, generation, pending, warm)
                self.record.attempts.append(outcome.summary())
                self.record.incidents.extend(outcome.incidents)
                if pending is not None and pending not in outcome.incidents:
                    # This attempt failed before its first step: the incident stays open-ended.
                    self.record.incidents.append(pending)
                    self.journal.append("incident", **pending.record())
                pending = None
                if outcome.succeeded:
                    self.record.final = outcome.final
                    self.record.region = region
                    self.sm.to(RunState.SUCCEEDED, region=region, generation=generation)
                    self.record.status = "SUCCEEDED"
                    break
                assert outcome.failure is not None
                pending = self._incident_for(outcome, region, generation)
                decision = self.policy.make_decision(outcome.failure, self.history, time.time())
                self.history = self.history.after(outcome.failure, decision, time.time())
                self.journal.append(
                    "decision",
                    action=str(decision.action),
                    region=decision.region,
                    reason=decision.reason,
                    failure=str(outcome.failure.kind),
                    failed_region=outcome.failure.region,
                )
                self.progress.note(_decision_text(decision.action, decision.region))
                if decision.action is Action.GIVE_UP:
                    self._fail(decision.reason, region, generation, pending)
                    break
                pending.to_region = decision.region
                self.journal.append("incident_opened", **pending.record())
                self.sm.to(RunState.RECOVERING, failure=str(outcome.failure.kind), to_region=decision.region)
                region = decision.region or region
                runner.journal_faults(runner.injector.at_point("failover", None, region, runner.last_step))
        except KeyboardInterrupt:
            self._fail("interrupted (SIGINT/SIGTERM); checkpoints are kept", region, generation, None)
        finally:
            run_all(
                [
                    self.standby.close,
                    runner.close,
                    lambda: self.replicator.stop(drain=self.record.status == "SUCCEEDED"),
                    self._abort_orphaned_uploads,
                    self.progress.close,
                    *(proxy.stop for proxy in self.proxies.values()),
                ]
            )
        result = write_result(self.run_dir, self.record, self.stores)
        self.journal.append("run_finished", status=result["status"], final_step=result["final_step"])
        return result

    def _abort_orphaned_uploads(self) -> None:
        """Every attempt and the replicator have stopped: a multipart upload still open
        under this run in any store (a replica's copy cut off, a fallback's upload) is
        one of ours that will never complete, billed and invisible until aborted."""
        for store in self.stores.values():
            try:
                aborted = store.abort_orphaned_uploads(self.run_id)
            except StoreError as exc:
                self.journal.append("multipart_abort_failed", region=store.region, error=str(exc))
                continue
            if aborted:
                self.journal.append("multipart_aborted", region=store.region, keys=aborted[:10])

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

    def _fail(self, reason: str, region: str, generation: int, pending: Incident | None) -> None:
        if pending is not None:
            self.record.incidents.append(pending)
            self.journal.append("incident", **pending.record())
        self.record.status = "FAILED"
        self.record.reason = reason
        self.record.region = region
        if not self.sm.state.terminal:
            self.sm.to(RunState.FAILED, reason=reason, region=region, generation=generation)


CONFIG_NAME = "config.json"


def control_url(cfg: Config, run_id: str, run_dir: str) -> str:
    return run_control_url(cfg.cloud.control_store, run_id, run_dir)


def save_config(run_dir: str, cfg: Config) -> None:
    """The run's whole config, for action=resume (credentials are refused in configs,
    and checked once more here, before they would reach the disk)."""
    import json

    from recovery.storage import refuse_secret

    refuse_secret(
        CONFIG_NAME,
        {
            "regions": {
                name: {"store": region.store, "storage_options": region.storage_options}
                for name, region in cfg.cloud.regions.items()
            },
            "control_store": cfg.cloud.control_store,
            "control_options": cfg.cloud.control_options,
        },
    )
    write_private(os.path.join(run_dir, CONFIG_NAME), json.dumps(to_plain(cfg), indent=1).encode())


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


def _decision_text(action: Action, region: str | None) -> str:
    if action is Action.FAILOVER:
        return f"failing over to {region}"
    if action is Action.RESTART_IN_PLACE:
        return f"restarting in {region}"
    return "giving up"
