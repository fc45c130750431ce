"""Wiring apart from working: the one place a run's collaborators are made from its
config and handed to the controller (``build_controller``).

What it makes, in order: the run's folder and secret (derived from the user's control
key where the run has a control store), the lease and mirror in the control store (before
anything else acts), the journal and the run's events (``listeners.RunEvents``), the
notify targets and their notifier, the run's keys, the control channel, the fault
proxies, the regions' stores, the failure policy, the progress line, the TensorBoard
writer, the tracker (tracking.kind), the replicator, the context the loop's parts share,
the warm standby, the fault injector and the attempt runner. Then the listeners, in the
order they are told: the notifier, the TensorBoard writer, the tracker, the progress
line, the fault injector's failover point, those ``metrics.listeners`` names, then the
ones the caller passes.

A new consumer of the run's events is one more listener: named in ``metrics.listeners``
(no change to the code at all), or, built in, registered here; nothing else under
``orchestrator/control/`` changes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.chaos.injector import FaultInjector
from orchestrator.chaos.listener import FaultPoints
from orchestrator.chaos.proxy import FaultProxy
from orchestrator.config.derived import proxy_target
from orchestrator.config.notify_targets import notify_from_env
from orchestrator.config.schema import Config, Placement
from orchestrator.control.attempt import AttemptRunner
from orchestrator.control.context import RunContext, store_options
from orchestrator.control.controller import Controller
from orchestrator.control.controlstate import ControlState, ControlStoreError, GuardedProvider
from orchestrator.control.hedge import HedgeManager
from orchestrator.control.listeners import Listener, ListenerRun, Named, RunEvents
from orchestrator.control.placement import cost_ranker, home_exposure
from orchestrator.control.pool import PooledStandby, PoolStore, pool_refusal
from orchestrator.control.progress import ProgressLine, chaos_text, notify_failed_text, tensorboard_failed_text
from orchestrator.control.standby import Standby, StandbyManager
from orchestrator.control.stopreq import clear_request
from orchestrator.metrics.board import NoMetrics, TensorBoardWriter, tensorboard_writer
from orchestrator.notify import secret as notify_secret
from orchestrator.notify.notifier import Notifier
from orchestrator.runstate import rundir
from orchestrator.runstate.event_json import to_json
from orchestrator.runstate.events import (
    ControlInvalid,
    LeaseTaken,
    ListenerFailed,
    NotifyFailed,
    ReplicationError,
    TensorBoardFailed,
)
from orchestrator.runstate.events import Replicated as ReplicatedEvent
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.rundir import make_control_dir, make_run_dir
from orchestrator.tracking.tracker import Both, Tracker, tracker_for
from orchestrator.wire.codec import to_plain
from orchestrator.wire.control import ControlChannel, Invalid, run_control_url
from orchestrator.wire.faults import STORAGE_FAULTS
from providers.base import Capability, Provider
from recovery.controlkey import forget_key, read_key
from recovery.keys import AttemptKeys, controller_keys
from recovery.policy import Budgets, FailurePolicy
from recovery.pool import pool_key
from recovery.replication import Replicated, Replicator
from recovery.signing import derive_state_key, derive_token_key, load_or_create_secret, secret_from_key
from recovery.store import CheckpointStore

__all__ = ["build_controller", "context", "policy_for", "stores_for"]


def build_controller(
    cfg: Config,
    provider: Provider,
    run_id: str,
    *,
    out: Any = None,
    clock: Callable[[], float] = time.time,
    control_key: bytes | None = None,
    listeners: Iterable[Listener] = (),
) -> Controller:
    """The controller of run ``run_id``, with every collaborator made from ``cfg``.

    ``out``: where the progress line and warnings go (stderr); ``control_key``: the user's
    key as the command read it, before it printed or wrote anything
    (recovery/controlkey.py, ``key_for``), None to read it from cfg.cloud.control_key
    here (an ``env:`` key already read reads as unset: the same None); ``listeners``:
    told every event the run journals, after the built-in ones."""
    run_dir = rundir.run_path(cfg.home_path, run_id)
    make_run_dir(run_dir)
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
    refused = pool_refusal(cfg, provider, control_key)
    if refused is not None:
        raise ControlStoreError(refused)
    secret, secret_created = load_or_create_secret(run_dir, derived)
    # The run's lease in the control store, before anything here acts: another
    # controller's (LeaseHeld) refuses this one (orchestrator/control/controlstate.py).
    hold: ControlState | None = None
    lease: LeaseTaken | None = None
    if cfg.cloud.control_store:
        hold = ControlState(cfg, run_id, run_dir, derive_state_key(secret, run_id), out)
        lease = hold.take()
        provider = GuardedProvider(provider, hold.guard)  # type: ignore[assignment]
    try:
        pool = None if control_key is None else cfg.recovery.standby_pool
        sealing = pool_key(control_key, pool) if control_key is not None and pool else None
        parts = _Parts(run_id, run_dir, secret, secret_created, hold, lease, sealing)
        return _wire(cfg, provider, parts, out, clock, list(listeners))
    except BaseException:
        if hold is not None:
            hold.close()  # a lease taken for a controller that never ran is freed at once
        raise


@dataclass(frozen=True)
class _Parts:
    """What the run has before it is wired: its folder, its secret, its lease."""

    run_id: str
    run_dir: str
    secret: bytes = field(repr=False)
    secret_created: bool
    hold: ControlState | None
    lease: LeaseTaken | None
    # What seals the records of the run's standby pool (recovery.standby_pool), if it names one.
    pool_key: bytes | None = field(default=None, repr=False)


def _wire(
    cfg: Config, provider: Provider, parts: _Parts, out: Any, clock: Callable[[], float], listeners: list[Listener]
) -> Controller:
    """The rest of the run's collaborators, once its lease (if any) is held."""
    run_id, run_dir, secret, hold = parts.run_id, parts.run_dir, parts.secret, parts.hold
    # A stop asked of a controller that died before it read it is not this one's.
    clear_request(run_dir)
    if not cfg.cloud.control_store:
        make_control_dir(run_dir)
    journal = Journal(rundir.journal_path(run_dir))
    events = RunEvents(
        journal,
        guard=None if hold is None else hold.guard,
        written=None if hold is None else hold.written,
    )
    progress = ProgressLine(out or sys.stderr, enabled=cfg.progress)

    def notify_failed(failed: NotifyFailed) -> None:
        events.emit(failed)
        progress.note(notify_failed_text(failed.target, failed.endpoint, failed.error))

    # notify.* whole: a new run's as given (env:VARNAME read), a resumed one's taken back
    # from notify.secret; a target that file cannot give is off (notify_off, on resume).
    notify, notify_lost = notify_secret.load(run_dir, notify_from_env(cfg.notify))
    # Delivers in the background (orchestrator/notify/notifier.py).
    notifier = Notifier(notify, run_id, cfg.job.name, failed=notify_failed)
    run_key = controller_keys(secret, run_id)
    # Remote clusters' Ray tokens come from the secret too, so a resumed controller has them.
    if Capability.TOKEN_KEY in provider.capabilities:
        provider.use_token_key(derive_token_key(secret, run_id))  # type: ignore[attr-defined]
    control = ControlChannel(
        control_url(cfg, run_id, run_dir),
        cfg.cloud.control_options,
        # Ignored, and said once: where and why, never the object (it may be huge, or a secret).
        on_invalid=lambda invalid: _control_invalid(events, invalid),
        keys=run_key,
    )
    if hold is not None:
        control.before_write = hold.guard
    proxies = start_proxies(cfg)
    stores = stores_for(cfg, proxies, run_key)
    policy = policy_for(cfg, rundir.journal_path(parts.run_dir))

    def tensorboard_failed(error: str) -> None:
        events.emit(TensorBoardFailed(error=error))
        progress.note(tensorboard_failed_text(error))

    # Writes in the background (orchestrator/metrics/board.py).
    metrics: TensorBoardWriter | NoMetrics = (
        tensorboard_writer(run_dir, tensorboard_failed) if cfg.metrics.tensorboard else NoMetrics()
    )
    # tracking.kind: the run in MLflow or W&B, from a thread of its own (orchestrator/tracking/).
    tracker = tracker_for(
        cfg,
        run_id,
        run_dir,
        events.emit,
        lambda error: events.emit(ListenerFailed(listener=Tracker.name, error=error)),
    )

    def replicated(r: Replicated) -> None:
        events.emit(
            ReplicatedEvent(
                step=r.step,
                from_=r.source,
                to=r.target,
                lag_s=round(r.lag_s, 3),
                copy_s=round(r.copy_s, 3),
                bytes=r.bytes,
            )
        )
        progress.replication_lag(r.lag_s)

    replicator = Replicator(
        run_id,
        keep_last=cfg.checkpoint.keep_last,
        on_replicated=replicated,
        on_error=lambda msg: events.emit(ReplicationError(error=msg)),
        lineage=lambda: events.view.lineage,
    )
    ctx = context(
        events,
        cfg,
        provider,
        run_id,
        run_dir,
        control,
        stores=stores,
        progress=progress,
        metrics=metrics if tracker is None else Both(metrics, tracker),
        replicator=replicator,
        proxies=proxies,
        run_key=run_key,
        clock=clock,
    )
    standby: Standby
    if cfg.recovery.standby_pool is not None and parts.pool_key is not None and cfg.cloud.control_store:
        pool = cfg.recovery.standby_pool
        store = PoolStore(
            cfg.cloud.control_store,
            cfg.cloud.control_options,
            pool,
            parts.pool_key,
            run_id,
            on_invalid=lambda path, why: events.emit(ControlInvalid(path=f"_pools/{pool}/{path}", reason=why)),
        )
        standby = PooledStandby(ctx, store, events.next_generation, lambda: events.view.history)
    elif cfg.recovery.hedge_max_launches > 0:
        standby = HedgeManager(ctx, events.next_generation, lambda: events.view.history)
    else:
        standby = StandbyManager(ctx, events.next_generation, lambda: events.view.history)
    injector = FaultInjector(
        [to_plain(f) for f in cfg.chaos.faults],
        control,
        provider,
        stores=lambda: list(stores.values()),
        run_id=run_id,
        proxies=proxies,
        on_event=events.emit,
        run_dir=run_dir,
    )
    runner = AttemptRunner(ctx, standby, injector)
    # Told every event, in this order (orchestrator/control/listeners.py).
    events.listen("notifier", notifier.offer, notifier.close)
    events.listen("tensorboard", metrics.event, metrics.close)
    if tracker is not None:
        events.add(tracker)
    events.listen("progress", lambda event, _view: progress.event(event))
    events.add(FaultPoints(injector, lambda fired: progress.note(chaos_text(fired.kind, fired.step, fired.detail))))
    run = ListenerRun(run_id, run_dir, cfg)
    for i, spec in enumerate(cfg.metrics.listeners):
        events.add(Named(spec, run, f"metrics.listeners[{i}]"))
    for listener in listeners:
        events.add(listener)
    return Controller(
        ctx,
        events,
        policy,
        runner,
        hold=hold,
        lease_taken=parts.lease,
        notify=notify,
        notify_lost=notify_lost,
        secret_created=parts.secret_created,
    )


def _control_invalid(events: RunEvents, invalid: Invalid) -> None:
    events.emit(ControlInvalid(path=invalid.path, reason=invalid.reason))


def context(
    events: RunEvents,
    cfg: Config,
    provider: Provider,
    run_id: str,
    run_dir: str,
    control: ControlChannel,
    **parts: Any,
) -> RunContext:
    """The context the loop's parts share, reading the run's state from ``events`` and
    saying what happens through it; ``parts``: the rest of RunContext's fields (stores,
    progress, metrics, the run's keys, ...), each defaulting to nothing."""
    return RunContext(
        run_id=run_id,
        run_dir=run_dir,
        cfg=cfg,
        provider=provider,
        control=control,
        emit=events.emit,
        candidates=cfg.candidate_regions(),
        lineage=lambda: events.view.lineage,
        transition=events.to,
        batch=events.journal.batch,
        owned=lambda: tuple(events.view.leftover),
        kept_runtimes=lambda: {name: to_json(p) for name, p in events.view.kept_runtimes.items()},
        **parts,
    )


def stores_for(cfg: Config, proxies: dict[str, Any], keys: AttemptKeys | None) -> dict[str, CheckpointStore]:
    """Each candidate region's checkpoint store, through its fault proxy if it has one."""
    return {
        r: CheckpointStore(
            cfg.cloud.regions[r].store,
            region=r,
            storage_options=store_options(cfg, proxies, r),
            key=keys,
        )
        for r in cfg.candidate_regions()
    }


def policy_for(cfg: Config, journal: str | None = None) -> FailurePolicy:
    """The failure policy with the run's budgets (recovery.*); with recovery.placement=cost
    and the run's ``journal``, a ranker by expected cost to finish (the home's earlier
    runs' losses read once, here)."""
    candidates = cfg.candidate_regions()
    ranker = None
    if cfg.recovery.placement is Placement.cost and journal:
        this_run = os.path.basename(os.path.dirname(journal))
        ranker = cost_ranker(cfg, journal, home_exposure(cfg.home_path, exclude=this_run))
    return FailurePolicy(
        candidates,
        Budgets(
            max_failovers=cfg.recovery.max_failovers,
            max_restarts_on_errors=cfg.recovery.max_restarts_on_errors,
            region_cooldown_s=cfg.recovery.region_cooldown_s,
            max_preemptions=cfg.recovery.max_preemptions,
            too_small=too_small(cfg, candidates),
        ),
        ranker,
    )


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
