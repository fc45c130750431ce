"""One attempt: provision a region, prepare the restore, run the runtime, watch it, tear down."""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from orchestrator.chaos.injector import FaultInjector, Injected
from orchestrator.config.schema import Config
from orchestrator.control.cleanup import run_all, sweep_runtimes, tear_down
from orchestrator.control.context import RunContext, keeps_runtime
from orchestrator.control.livelogs import LiveLogs
from orchestrator.control.naming import RESTARTED_IN_PLACE, keep_for_restart
from orchestrator.control.outcome import AttemptOutcome
from orchestrator.control.placement import capacity_for
from orchestrator.control.progress import chaos_text
from orchestrator.control.resume import AdoptedProcess, Adoption, handle_of
from orchestrator.control.standby import Standby, Warm
from orchestrator.control.watch import AttemptWatch
from orchestrator.runstate import rundir
from orchestrator.runstate.events import (
    AttemptAdopted,
    AttemptEnded,
    AttemptStarted,
    CapacityChosen,
    CheckpointSkipped,
    ClusterKept,
    FaultReleaseFailed,
    Fence,
    Provisioned,
    ProvisionFailed,
    ProvisionRetry,
    RestoreCopied,
    RestoreCopyFailed,
    RestoreStoreSkipped,
    RuntimeReport,
    RuntimeStarted,
    StandbyActivated,
    TeardownDeferred,
)
from orchestrator.runstate.incidents import Incident
from orchestrator.runstate.journal import DamagedFile, read_typed
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.rundir import DRIVER_LOG, attempt_dir
from orchestrator.wire import runkey
from orchestrator.wire.codec import to_plain
from orchestrator.wire.spec import TRAIN_ENV, RuntimeSpec
from providers.base import (
    PROVISION_FAILURE,
    Capability,
    ClusterHandle,
    ProvisionError,
    ProvisionErrorKind,
    RegionSpec,
    RuntimeProcess,
)
from recovery.detection import Failure, Health
from recovery.fencing import Lineage
from recovery.keys import AttemptKeys
from recovery.replication import ReplicationError, replicate, sync_newest
from recovery.retry import Backoff, retrying
from recovery.signing import SigningError
from recovery.store import CheckpointStore, StoreError

__all__ = ["AttemptOutcome", "AttemptRunner"]

FENCE_WAIT_S = 5.0
PROVISION_RETRIES = 2
PROVISION_BACKOFF_S = 1.0
# How long an attempt ended by a failure restarted in place waits for its runtime to
# exit before its cluster may be kept for the next attempt (naming.keep_for_restart).
KEEP_WAIT_S = 30.0


class AttemptRunner:
    """Runs attempts one after another for the controller: each returns its outcome.

    It never decides what comes next and holds none of the run's state but the last
    step known done; what it does is said through ``ctx.emit``."""

    def __init__(self, ctx: RunContext, standby: Standby | None = None, injector: FaultInjector | None = None) -> None:
        """``injector``: the run's fault injector (the wiring's, from chaos.faults); None: one
        with no fault to inject."""
        self.ctx = ctx
        self.standby = standby
        self.cluster: ClusterHandle | None = None
        self.cluster_generation = 0  # the attempt self.cluster runs
        self.injector = injector if injector is not None else no_faults(ctx)
        self.last_step = 0
        # The last attempt's cluster, kept for a restart in place (cluster_kept), and its generation.
        self.kept: tuple[ClusterHandle, int] | None = None
        self._sweepers: list[threading.Thread] = []
        # Attempts a deadline moved off their region's spot capacity (recovery.deadline_s).
        self._on_demand: set[int] = set()
        self._zombie_seen: dict[int, set[str]] = {}
        if standby is not None:
            standby.launch, standby.start_runtime = self.launch, self.start_runtime

    def close(self, generation: int = 0) -> None:
        """Tear down what is still up, wait for background sweeps, and journal what the
        attempts before ``generation`` (the newest the run allocated) still did."""
        cluster, gen = self.cluster, self.cluster_generation
        kept, self.kept = self.kept, None
        run_all(
            [
                self.injector.close,
                *([lambda: self._teardown(cluster, gen)] if cluster is not None else []),
                *([lambda: self._teardown(*kept)] if kept is not None else []),
                *(t.join for t in self._sweepers),
                lambda: self.scan_zombies(generation + 1) if generation > 1 else None,
                self._sweep_runtimes,
            ]
        )

    def _sweep_runtimes(self) -> None:
        """The run is over: what its lost clusters kept of their runtimes goes too."""
        kept = self.ctx.kept_runtimes()
        if kept:
            handles = {name: handle_of(self.ctx, provisioned) for name, provisioned in kept.items()}
            sweep_runtimes(self.ctx.provider, self.ctx.emit, handles)

    def launch(self, region: str, gen: int, purpose: str = "attempt") -> ClusterHandle:
        """A cluster in ``region``, journaled; ProvisionError as the provider raised it."""
        ctx = self.ctx
        spec_r = ctx.cfg.cloud.regions[region]
        spot = self._capacity(region, gen) if purpose == "attempt" else None
        t0 = time.time()
        try:
            # Transient errors are retried here and only here; others go to the policy. A
            # timeout is not transient: the region had recovery.provision_timeout_s, and
            # retrying it would keep the run there for a multiple of that before failing over.
            cluster = retrying(
                lambda: ctx.provider.launch(
                    RegionSpec(region, spec_r.store, spec_r.num_cpus, spec_r.num_gpus, spec_r.node_count(), spot),
                    ctx.cluster_name(region, gen),
                    ctx.cfg.recovery.provision_timeout_s,
                    env=TRAIN_ENV,
                ),
                attempts=PROVISION_RETRIES + 1,
                backoff=Backoff(PROVISION_BACKOFF_S),
                retryable=lambda exc: isinstance(exc, ProvisionError) and exc.kind is ProvisionErrorKind.TRANSIENT,
                on_retry=lambda n, exc, _delay: ctx.emit(
                    ProvisionRetry(region=region, error=str(exc)[:500], retry=n, purpose=purpose)
                ),
            )
        except ProvisionError as exc:
            ctx.emit(
                ProvisionFailed(region=region, kind=str(exc.kind), error=str(exc), purpose=purpose, generation=gen)
            )
            raise
        if purpose == "attempt":
            # Up, nothing on it yet, not journaled: the moment a crash would leave a cluster behind.
            self.journal_faults(self.injector.at_point("provisioning", cluster, region, self.last_step))
        ctx.emit(
            Provisioned(
                region=region,
                cluster=cluster.name,
                address=cluster.address,
                provision_s=round(time.time() - t0, 3),
                purpose=purpose,
                generation=gen,
                info=cluster.info,
            )
        )
        if cluster.info.get("dashboard"):
            access = cluster.info.get("dashboard_access")
            ctx.progress.note(
                f"Ray dashboard of {cluster.name}: {cluster.info['dashboard']}" + (f" ({access})" if access else "")
            )
        return cluster

    def _capacity(self, region: str, gen: int) -> bool | None:
        """recovery.deadline_s on a spot region: spot or on-demand for this launch, by the
        deadline's slack (journaled as ``capacity``); None: as the region says."""
        ctx = self.ctx
        try:
            events = list(read_typed(rundir.journal_path(ctx.run_dir)))
        except (DamagedFile, OSError):
            events = []
        chosen = capacity_for(ctx.cfg, events, region, ctx.clock())
        if chosen is None:
            return None
        ctx.emit(
            CapacityChosen(
                region=region,
                generation=gen,
                spot=chosen.spot,
                policy=str(ctx.cfg.recovery.deadline_policy),
                reason=chosen.reason,
                slack_s=chosen.slack_s,
                needed_s=chosen.needed_s,
            )
        )
        if not chosen.spot:
            self._on_demand.add(gen)
            ctx.progress.note(f"recovery.deadline_s: attempt {gen} in {region} runs on on-demand ({chosen.reason})")
        return chosen.spot

    def journal_faults(self, fired: list[Injected]) -> None:
        for inj in fired:
            if not inj.said:
                self.ctx.emit(inj.event())
            self.ctx.progress.note(chaos_text(inj.kind, inj.step, inj.detail))

    def run(self, region: str, gen: int, pending: Incident | None, warm: Warm | None = None) -> AttemptOutcome:
        ctx = self.ctx
        out = AttemptOutcome(
            generation=gen, region=region, started_at=time.time(), last_step=self.last_step, pending=pending
        )
        ctx.emit(AttemptStarted(generation=gen, region=region, standby=warm is not None))
        kept = self._kept_for(region, gen, out, standby=warm is not None)
        proc: RuntimeProcess | None = None
        if warm is not None:
            cluster, proc = warm.cluster, warm.proc
            if warm.pool is not None:
                # The pool's cluster is this run's from here: journaled as its attempt's own
                # at once (a crash from here on sweeps it as any cluster of the run's).
                ctx.emit(
                    Provisioned(
                        region=region,
                        cluster=cluster.name,
                        address=cluster.address,
                        provision_s=0.0,
                        purpose="attempt",
                        generation=gen,
                        info=cluster.info,
                        pool=warm.pool,
                    )
                )
            self._ready_stores(region, gen, out)
        elif kept is not None:
            cluster = kept
        else:
            try:
                cluster = self._launch_beside_stores(region, gen, out)
            except ProvisionError as exc:
                out.failure = Failure(PROVISION_FAILURE[exc.kind], region, str(exc))
                out.detected_at = out.ended_at = time.time()
                ctx.emit(AttemptEnded(**out.summary()))
                return out
        self.cluster, self.cluster_generation = cluster, gen
        try:
            ctx.replicator.follow(ctx.stores[region], list(ctx.stores.values()))
            if warm is not None and warm.proc is not None:
                # The standby's workers are up and waiting: this file is their go.
                ctx.control.activate(gen, lineage=ctx.lineage().to_plain())
                ctx.emit(StandbyActivated(region=region, generation=gen, cluster=cluster.name))
            else:
                proc = self.start_runtime(cluster, region, gen)
            ctx.transition(RunState.RUNNING, region=region, generation=gen, cluster=cluster.name)
            if self.standby is not None:
                self.standby.ensure(region)  # the run is RUNNING here: a standby where a failover would go
            proc = self._watch(cluster, proc, out, pending)
        finally:
            if self._may_keep(cluster, out, proc):
                self.cluster, self.kept = None, (cluster, gen)
                assert out.failure is not None
                ctx.emit(ClusterKept(cluster=cluster.name, generation=gen, failure=str(out.failure.kind)))
            else:
                # A failed cluster is swept in the background: the failover must not wait for it.
                self._teardown(cluster, gen, background=out.failure is not None)
            out.ended_at = ctx.clock()
            self.last_step = out.last_step
            ctx.emit(AttemptEnded(**out.summary()))
        return out

    def _may_keep(self, cluster: ClusterHandle, out: AttemptOutcome, proc: RuntimeProcess | None) -> bool:
        """Keep the cluster for a restart in place (naming.keep_for_restart)? A user error
        is seen before the runtime has exited: its end is waited for (KEEP_WAIT_S), far
        less than the launch that keeping saves."""
        provider = self.ctx.provider
        failure = out.failure
        if not keeps_runtime(provider) or failure is None or failure.kind not in RESTARTED_IN_PLACE:
            return False
        deadline = time.monotonic() + KEEP_WAIT_S
        ended = self._runtime_ended(out.generation, proc)
        while not ended and time.monotonic() < deadline:
            time.sleep(0.2)
            ended = self._runtime_ended(out.generation, proc)
        try:
            up = ended and provider.health(cluster).health is Health.UP
        except Exception:
            up = False  # cannot tell: not kept
        return keep_for_restart(failure.kind, keeps_runtime=True, runtime_ended=ended, up=up)

    def _runtime_ended(self, gen: int, proc: RuntimeProcess | None) -> bool:
        """The attempt's runtime is gone: its exit word is on the control channel (its
        last act), or the connection that followed it ended with the runtime's own status
        (not a connection that failed while the runtime may live on)."""
        if self.ctx.control.read_exit(gen) is not None:
            return True
        return proc is not None and proc.poll() is not None and not getattr(proc, "connection_failed", False)

    def _kept_for(self, region: str, gen: int, out: AttemptOutcome, standby: bool) -> ClusterHandle | None:
        """The kept cluster, if this attempt can take it: the same region, no standby
        taking over, and still up; it is readied as a launched one is (the restore's
        store, the fence). Otherwise it is torn down in the background and None."""
        if self.kept is None:
            return None
        cluster, kept_gen = self.kept
        self.kept = None
        take = not standby and cluster.region == region
        if take:
            try:
                take = self.ctx.provider.health(cluster).health is Health.UP
            except Exception:
                take = False
        if not take:
            self._teardown(cluster, kept_gen, background=True)
            return None
        t0 = time.time()
        try:
            self._ready_stores(region, gen, out)
        except BaseException:
            self._teardown(cluster, kept_gen)
            raise
        self.ctx.emit(
            Provisioned(
                region=region,
                cluster=cluster.name,
                address=cluster.address,
                provision_s=round(time.time() - t0, 3),
                purpose="attempt",
                generation=gen,
                info=cluster.info,
                kept_from=kept_gen,
            )
        )
        return cluster

    def _ready_stores(self, region: str, gen: int, out: AttemptOutcome) -> None:
        """The region's store holds the newest checkpoint that verifies, and every store
        is fenced: from here on a zombie of the last attempt (partitioned, still
        training) can commit nothing a restore would take past the handover.

        The last attempt may still commit between the scan and the fence: a cancelled
        allocation's processes finish the upload in flight in their grace period
        (SIGTERM, then SIGKILL). Once the fence is written no more of its commits can
        land, so the stores are looked at again, and a newer checkpoint found there
        moves this generation's link to it (still before its runtime reads the
        lineage): nothing committed before the handover is lost."""
        ctx = self.ctx
        before = ctx.lineage()
        first = self._prepare_restore(region, before)
        out.restored_step = first.step
        self._fence(gen, first.step)
        others = [s for r, s in ctx.stores.items() if r not in first.failed]
        listed = set(_committed(ctx.run_id, others))
        landed = {c for c in listed if c[1] > first.step and c not in first.passed}
        if landed:
            later = self._prepare_restore(region, before, exclude=listed - landed).step
            if later > first.step:
                self._fence(gen, later, moved_from=first.step)
                out.restored_step = later

    def _launch_beside_stores(self, region: str, gen: int, out: AttemptOutcome) -> ClusterHandle:
        """Launch the region's cluster while its store is readied and fenced: neither needs
        the other, and only the runtime, started after both, reads the fence's lineage.
        A launch that succeeds while the stores fail is torn down, never left behind."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="launch")
        launching = pool.submit(self.launch, region, gen)
        pool.shutdown(wait=False)
        try:
            self._ready_stores(region, gen, out)
        except BaseException:
            try:
                self._teardown(launching.result(), gen)
            except ProvisionError:
                pass  # nothing came up: the stores' error is the one to report
            raise
        return launching.result()

    def adopt(self, adoption: Adoption, pending: Incident | None) -> AttemptOutcome:
        """Watch an attempt a crashed controller left training, to its end."""
        ctx = self.ctx
        out = AttemptOutcome(
            generation=adoption.generation,
            region=adoption.region,
            started_at=time.time(),
            last_step=self.last_step,
            restored_step=adoption.restored_step,
            pending=pending,
        )
        cluster = self.cluster = adoption.cluster
        self.cluster_generation = adoption.generation
        ctx.emit(AttemptAdopted(generation=adoption.generation, region=adoption.region, cluster=cluster.name))
        try:
            ctx.replicator.follow(ctx.stores[adoption.region], list(ctx.stores.values()))
            proc = AdoptedProcess(adoption.pid, ctx.control, adoption.generation)
            self._watch(cluster, proc, out, pending, journaled=adoption.journaled)
        finally:
            self._teardown(cluster, adoption.generation, background=out.failure is not None)
            out.ended_at = ctx.clock()
            self.last_step = out.last_step
            ctx.emit(AttemptEnded(**out.summary()))
        return out

    def _teardown(self, cluster: ClusterHandle, gen: int, background: bool = False) -> None:
        """Tear the attempt's cluster down, its ranks' logs kept in the attempt's folder first."""
        self.cluster = None
        try:
            self.injector.release(cluster)
        except Exception as exc:  # a fault that cannot be undone must not keep the cluster up
            self.ctx.emit(FaultReleaseFailed(cluster=cluster.name, error=str(exc)[:500]))
        wait = self.injector.unreachable_until(cluster) - time.time()
        if wait > 0 and not background:
            self.ctx.emit(TeardownDeferred(cluster=cluster.name, seconds=round(wait, 3)))
            time.sleep(wait)
        if background:
            t = threading.Thread(target=self._teardown, args=(cluster, gen), name=f"teardown-{cluster.name}")
            t.start()
            self._sweepers.append(t)
            return
        tear_down(
            self.ctx.provider,
            self.ctx.emit,
            cluster,
            logs_to=attempt_dir(self.ctx.run_dir, gen),
            generation=gen,
        )

    def _prepare_restore(self, region: str, lineage: Lineage, exclude: set[tuple[str, int]] | None = None) -> Scan:
        """Make sure the region's store holds the newest checkpoint that verifies anywhere
        on ``lineage``, the (region, step) candidates in ``exclude`` passed over unread."""
        ctx = self.ctx
        target = ctx.stores[region]
        stores = [target, *(s for r, s in ctx.stores.items() if r != region)]
        scan = Scan()

        def skipped(store: CheckpointStore, step: int, reason: str) -> None:
            scan.passed.add((store.region, step))
            ctx.emit(CheckpointSkipped(by="controller", region=store.region, step=step, reason=reason))

        def store_failed(store: CheckpointStore, error: str) -> None:
            scan.failed.add(store.region)
            ctx.emit(RestoreStoreSkipped(by="controller", region=store.region, error=error[:500]))

        best = sync_newest(ctx.run_id, stores, skipped, lineage, exclude or set(), store_failed)
        if best is None:
            return scan
        src, manifest = best
        if src is not target:
            try:
                r = replicate(src, target, manifest)
            except (StoreError, ReplicationError) as exc:
                # Still the newest: the runtime's choice reads every store, this one's copy
                # only spared it the reach. A handover at 0 would refuse it, and the run
                # would start again from nothing.
                ctx.emit(RestoreCopyFailed(step=manifest.step, error=str(exc)))
                scan.step = manifest.step
                return scan
            if r is not None:
                ctx.emit(RestoreCopied(step=r.step, from_=r.source, to=r.target, copy_s=round(r.copy_s, 3)))
        scan.step = manifest.step
        return scan

    def _fence(self, gen: int, restored: int, moved_from: int | None = None) -> None:
        """Generation ``gen`` takes over from step ``restored``: tell every store. The
        ``fence`` event then moves the run's lineage (the controller applies it)."""
        ctx = self.ctx
        lineage = ctx.lineage().then(gen, restored)
        pool = ThreadPoolExecutor(max_workers=max(1, len(ctx.stores)), thread_name_prefix="fence")
        futures = {r: pool.submit(s.write_fence, ctx.run_id, lineage) for r, s in ctx.stores.items()}
        done, failed = [], {}
        for region, fut in futures.items():
            try:
                fut.result(timeout=FENCE_WAIT_S)
                done.append(region)
            except Exception as exc:  # an unreachable store: restore's lineage check still holds
                failed[region] = f"{type(exc).__name__}: {str(exc)[:200]}"
        pool.shutdown(wait=False)
        ctx.emit(
            Fence(generation=gen, restored_step=restored, stores=tuple(done), failed=failed, moved_from=moved_from)
        )

    def start_runtime(self, cluster: ClusterHandle, region: str, gen: int, standby: bool = False) -> RuntimeProcess:
        ctx = self.ctx
        cfg = ctx.cfg
        folder = attempt_dir(ctx.run_dir, gen)
        os.makedirs(folder, exist_ok=True)
        spec = RuntimeSpec(
            run_id=ctx.run_id,
            generation=gen,
            region=region,
            store_url=cfg.cloud.regions[region].store,
            store_options=ctx.store_options(region),
            fallback_stores=[
                {"region": r, "url": cfg.cloud.regions[r].store, "options": ctx.store_options(r)}
                for r in _after(ctx.candidates, region)
            ],
            store_outage_s=cfg.recovery.store_outage_s,
            control_url=ctx.control.url,
            control_options=ctx.control.options,
            ray_address=cluster.address,
            ray_storage_path=os.path.join(ray_storage_root(cluster.info, folder), "train"),
            job=to_plain(cfg.job),
            trainer=to_plain(cfg.trainer),
            checkpoint=to_plain(cfg.checkpoint),
            faults=[to_plain(f) for f in cfg.chaos.faults],
            heartbeat_interval_s=cfg.recovery.heartbeat_interval_s,
            standby=standby,
            scratch_dir=cluster.info.get("scratch_dir"),
            log_dir=cluster.info.get("log_dir"),
            data=runtime_data(cfg),
            hpo=runtime_hpo(cfg),
            lineage=ctx.lineage().to_plain(),
            preemption_notice=runtime_notice(cfg, region),
            nodes=cfg.cloud.regions[region].node_count(),
            node_wait_s=cfg.recovery.node_replace_timeout_s,
            survivors=str(cfg.recovery.survivors),
            peer_restore=str(cfg.recovery.peer_restore),
            spares=str(cfg.recovery.spares),
            on_demand=gen in self._on_demand,
        )
        spec_path = os.path.join(folder, "spec.json")
        spec.dump(spec_path)
        proc = ctx.provider.start_runtime(
            cluster,
            [sys.executable, "-m", "orchestrator.runtime", spec_path],
            # This generation's keys: in the driver's environment only (orchestrator/wire/runkey.py).
            env=runkey.to_env(attempt_keys(ctx, gen)),
            log_path=os.path.join(folder, DRIVER_LOG),
        )
        ctx.emit(RuntimeStarted(generation=gen, pid=proc.pid, standby=standby))
        return proc

    def scan_zombies(self, current: int) -> None:
        """Journal what attempts before ``current`` still did: fenced writes above all."""
        for gen in range(1, current):
            seen = self._zombie_seen.setdefault(gen, set())
            for ev in self.ctx.control.read_events(gen, seen):
                if ev.kind in ("fenced_write", "fenced"):
                    fields = {**ev.fields, "time": ev.time, "generation": ev.generation}
                    self.ctx.emit(RuntimeReport(kind=ev.kind, fields={**fields, "by": "zombie"}))

    def _watch(
        self,
        cluster: ClusterHandle,
        proc: RuntimeProcess,
        out: AttemptOutcome,
        pending: Incident | None,
        journaled: frozenset[tuple[str, float]] = frozenset(),
    ) -> RuntimeProcess:
        """Watch the attempt to its end; ``out`` takes what the watch folded. The connection
        that followed the runtime last (re-attached)."""
        standby = self.standby
        live = self._live_logs(cluster, out.generation)

        def tick() -> None:
            if standby is not None:
                standby.check()
            if live is not None:
                live.poll()

        watch = AttemptWatch(
            self.ctx,
            self.injector,
            cluster,
            proc,
            generation=out.generation,
            region=out.region,
            last_step=out.last_step,
            restored_step=out.restored_step,
            pending=pending,
            tick=tick,
            on_look=(lambda obs, noticed: None) if standby is None else standby.observe,
            scan_zombies=self.scan_zombies,
            journaled=journaled,
        )
        try:
            watch.run()
            return watch.proc
        finally:
            out.watched(watch.state)
            if live is not None:
                live.poll(final=True)

    def _live_logs(self, cluster: ClusterHandle, gen: int) -> LiveLogs | None:
        """show_logs=true: the attempt's output as it comes; the ranks' files where they
        are on this machine (the local provider's), the driver's log always."""
        ctx = self.ctx
        if not ctx.cfg.show_logs:
            return None
        here = Capability.LOCAL_PROCESSES in ctx.provider.capabilities and cluster.info.get("log_dir")
        driver = os.path.join(attempt_dir(ctx.run_dir, gen), DRIVER_LOG)
        return LiveLogs(gen, driver, str(here) if here else None, ctx.progress.log)


@dataclass
class Scan:
    """What readying a restore found: the step it restores (0: none), the (region, step)
    candidates it passed over (journaled skips) and the regions whose store failed it."""

    step: int = 0
    passed: set[tuple[str, int]] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)


def _committed(run_id: str, stores: list[CheckpointStore]) -> list[tuple[str, int]]:
    """(region, step) of every checkpoint committed in the stores that answer a listing."""
    out: list[tuple[str, int]] = []
    for store in stores:
        try:
            out += [(store.region, step) for step in store.committed_steps(run_id)]
        except Exception:  # not answering now: the restore's own scan passed over it or will
            continue
    return out


def no_faults(ctx: RunContext) -> FaultInjector:
    """An injector with no fault to inject: a runner built without the run's."""
    return FaultInjector(
        [], ctx.control, ctx.provider, stores=lambda: list(ctx.stores.values()), run_id=ctx.run_id, on_event=ctx.emit
    )


def attempt_keys(ctx: RunContext, generation: int) -> AttemptKeys:
    """What generation ``generation`` may sign and check with: its own key and the fence
    public key, never the controller's (recovery/keys.py)."""
    if ctx.run_key is None:
        raise SigningError("the run has no keys: the controller makes them from its secret before any attempt")
    return ctx.run_key.for_attempt(generation)


def ray_storage_root(info: dict[str, Any], attempt_dir: str) -> str:
    """Where Ray Train keeps its run (a search's experiment among it): the cluster's
    private folder, not Ray's temp dir, which Ray makes world-writable."""
    return str(info.get("base_dir") or info.get("temp_dir") or attempt_dir)


def runtime_data(cfg: Config) -> dict[str, Any]:
    """data.* for the runtime, the cache folder resolved (generated data sets live under home)."""
    data = to_plain(cfg.data)
    data["cache_dir"] = cfg.data.cache_dir or os.path.join(cfg.home_path, "data")
    return data


def runtime_notice(cfg: Config, region: str) -> dict[str, str]:
    """The region's preemption notice for its runtime: auto resolved by the region's infra."""
    rc = cfg.cloud.regions[region]
    return {"source": rc.notice_source().value, "url": rc.preemption_notice_url}


def runtime_hpo(cfg: Config) -> dict[str, Any] | None:
    """hpo.* and what recovery says about errored trials, when the job is a search."""
    if not cfg.hpo.enabled:
        return None
    return {
        **to_plain(cfg.hpo),
        "resume_errored": cfg.recovery.resume_errored,
        "restart_errored": cfg.recovery.restart_errored,
    }


def _after(candidates: list[str], region: str) -> list[str]:
    """The other candidates, in preference order starting after ``region``."""
    if region not in candidates:
        return list(candidates)
    i = candidates.index(region)
    return candidates[i + 1 :] + candidates[:i]
