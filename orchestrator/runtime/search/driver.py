"""The search's driver, in Tune's controller: snapshots, progress and chaos faults.

Tune's events come in through ``SearchCallback`` and go to this process's
``SearchDriver``. Where the experiment lives: Tune keeps its experiment folder on the
cluster's local scratch, and the driver snapshots the search into the region's
CheckpointStore as an ordinary checkpoint at step = the search step (see
``orchestrator/hpo.py``): one ``experiment.tar`` of plain data (see ``snapshot``). So
replication, verification, retention and fencing apply to a search unchanged, which
pointing Tune's ``storage_path`` at the store would not give: Tune writes its state and
trial checkpoints as many separate files with no commit marker, no checksum and no
generation check. Each trial's checkpoints are ordinary checkpoints of their own
(``trial_store``), committed before the snapshot that names them (``uploads``).

Consistency of a snapshot: it is taken in Tune's controller thread at the end of a step
(``on_step_end``), when every result of the step has been processed: the records, the
rungs and the checkpoints Tune has registered agree. A trial whose newest result has no
registered checkpoint yet resumes from its previous one. Snapshots are at least
``hpo.snapshot_interval_s`` apart, and one is taken at the end.
"""

from __future__ import annotations

import time
from typing import Any

from ray import tune

from orchestrator.hpo import TERMINATED, AshaRungs, TrialRecord, best_of, counts, max_search_steps, search_step
from orchestrator.hpo.pbt import Exploit
from orchestrator.hpo.replay import OptunaReplay
from orchestrator.runtime import fault_rendezvous
from orchestrator.runtime.checkpoint.background import AsyncCheckpointer
from orchestrator.runtime.loop.telemetry import summary
from orchestrator.runtime.loop.worker import spec_stores
from orchestrator.runtime.search.groups import TrialGroups
from orchestrator.runtime.search.records import latest_checkpoint, live_records, live_workers, reported_metrics
from orchestrator.runtime.search.section import search_of
from orchestrator.runtime.search.snapshot import ResumePlan, SearchSnapshot, pack
from orchestrator.runtime.search.trial import read_trial_checkpoint, trial_id_of
from orchestrator.runtime.search.trial_store import TrialRef, TrialStore
from orchestrator.runtime.search.uploads import SearchUploader, SnapshotJob
from orchestrator.wire import runkey
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.faults import SEARCH_REGION_FAULTS
from orchestrator.wire.spec import RuntimeSpec

PROGRESS_EVERY_S = 0.5
REGION_FAULT_LANDS_S = 10.0


def snapshot_due(dirty: bool, since_last_s: float, interval_s: float) -> bool:
    """A snapshot when something changed and the last one is ``interval_s`` old."""
    return dirty and since_last_s >= interval_s


class SearchCallback(tune.Callback):
    """Hands Tune's events to this process's SearchDriver. Stateless on purpose: Tune pickles
    its RunConfig (callbacks included) into its experiment folder on scratch."""

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict, **info: Any) -> None:
        current_driver().result(trial, result)
        current_driver().changed(trials)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        current_driver().changed(trials)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        current_driver().changed(trials)

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        current_driver().sweep(trials, also=trial_id_of(trial))

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        # Every loop of Tune's: a trial that stopped (completed, errored, paused) is seen here.
        current_driver().sweep(trials)
        current_driver().maybe_snapshot(trials)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        current_driver().snapshot(trials, final=True)


_DRIVERS: list[SearchDriver] = []


def current_driver() -> SearchDriver:
    return _DRIVERS[-1]


def report_exploit(decision: Exploit) -> None:
    """A PBT decision to this process's SearchDriver (StablePBT's ``on_exploit``)."""
    current_driver().exploit(decision)


def install(driver: SearchDriver) -> None:
    """Make ``driver`` the one SearchCallback hands Tune's events to."""
    _DRIVERS.append(driver)


class SearchDriver:
    """Snapshots the search, reports progress and meets chaos faults (through SearchCallback)."""

    def __init__(
        self,
        spec: RuntimeSpec,
        control: ControlChannel,
        restored_step: int,
        restored_url: str | None,
        configs: list[dict[str, Any]],
        plan: ResumePlan,
        rungs: AshaRungs | None,
        count: int | None = None,
        proposer: OptunaReplay | None = None,
        restored_refs: dict[str, TrialRef] | None = None,
        read_from: dict[str, str] | None = None,
    ):
        self.spec, self.control, self.gen = spec, control, spec.generation
        self.hpo = search_of(spec)
        self.configs, self.plan, self.rungs, self.proposer = configs, plan, rungs, proposer
        # hpo.scheduler=pbt: every exploit decision so far (the snapshot's, then this attempt's).
        self.exploits: list[Exploit] | None = None
        stores = spec_stores(spec, runkey.require())

        def on_event(type_: str, fields: dict[str, Any]) -> None:
            control.event(spec.generation, type_, **fields)

        checkpointer = AsyncCheckpointer(
            stores,
            spec.run_id,
            spec.generation,
            spec.checkpoint.keep_last,
            outage_s=spec.store_outage_s,
            on_event=on_event,
            replicate=True,
            lineage=spec.fencing_lineage(),
        )
        trial_store = TrialStore(stores, spec.run_id, spec.generation, spec.store_outage_s, on_event)
        here = {t: ref for t, ref in (restored_refs or {}).items() if (read_from or {}).get(t) == stores[0].region}
        sizes = {t: sum(map(len, plan.checkpoints.get(t, {}).values())) for t in here}
        trial_store.adopt(here, sizes)
        self.restored_refs = dict(restored_refs or {})
        self.uploads = SearchUploader(checkpointer, trial_store, spec.checkpoint.keep_last, on_event, restored_refs)
        self.restored_step, self.restored_url = restored_step, restored_url
        self.total = max_search_steps(len(configs) if count is None else count, self.hpo.max_t)
        self.last_snapshot_step = restored_step
        self.last_snapshot_t = 0.0
        self.dirty = False
        self.t0 = time.time()
        self.last_report = 0.0
        self.step = restored_step
        self.snapshots = 0
        # The records of this attempt's last snapshot: what the result claims (ended_records).
        self.snapshot_records: list[TrialRecord] | None = None
        self.groups = TrialGroups()

    @property
    def last_checkpoint(self) -> str | None:
        return self.uploads.committed_url or self.restored_url

    def records(self, trials: list[Any]) -> list[TrialRecord]:
        """Every trial of the search: the carried ones as the snapshot had them, the rest live."""
        return live_records(self.plan.carried, trials, self.configs, self.plan.restored)

    # --- progress and chaos ---------------------------------------------------------------
    def result(self, trial: Any, result: dict) -> None:
        """Each iteration of a trial, journaled (``trial_result``): the search's curves in
        action=report and TensorBoard (one run per trial)."""
        self.groups.note(trial_id_of(trial), result)
        metrics, iteration = reported_metrics(result), result.get("iteration")
        if metrics and isinstance(iteration, int):
            self.control.event(
                self.gen, "trial_result", trial_id=trial_id_of(trial), iteration=iteration, metrics=metrics
            )

    def exploit(self, decision: Exploit) -> None:
        """A PBT decision: journaled (``pbt_exploit``), and in every snapshot from now on."""
        if self.exploits is None:
            self.exploits = []
        self.exploits.append(decision)
        self.dirty = True
        self.control.event(self.gen, "pbt_exploit", **decision.to_json())

    def changed(self, trials: list[Any]) -> None:
        self.dirty = True
        records = self.records(trials)
        self.step = max(self.step, search_step(records))
        self.report(trials, records)
        self.chaos(self.step)

    def report(self, trials: list[Any], records: list[TrialRecord], force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last_report < PROGRESS_EVERY_S:
            return
        self.last_report = now
        best = best_of(records, self.hpo.metric, self.hpo.mode)
        workers = live_workers(trials)
        self.control.progress(
            self.gen,
            step=self.step,
            total=self.total,
            steps_per_s=(self.step - self.restored_step) / max(now - self.t0, 1e-9),
            last_checkpoint=self.last_checkpoint,
            restored_step=self.restored_step,
            trials=counts(records),
            best=None
            if best is None
            else {"metric": self.hpo.metric, "value": best.metrics[self.hpo.metric], "trial_id": best.trial_id},
            telemetry=summary(workers) if workers else None,
        )

    def chaos(self, step: int) -> None:
        """Faults name a search step: met here, in the driver, as the train loop meets a step."""
        for i, fault in enumerate(self.spec.faults):
            if fault.at_step is None or step < fault.at_step:
                continue
            if not fault_rendezvous.armed(self.control, i, fault, self.spec.region, self.spec.on_demand):
                continue
            self.uploads.wait()  # land at a quiescent point, as training runs do
            met = fault_rendezvous.meet(self.control, i, fault, step=step, rank=0, generation=self.gen)
            if met and fault.kind in SEARCH_REGION_FAULTS:
                # The controller marks a fault fired just before it carries it out (so that it
                # never fires twice); a region's fault takes the whole region, so hold here
                # while it lands, or the search could snapshot past the fault's step. (A
                # corrupt checkpoint is done before it is marked: nothing to wait for.)
                time.sleep(REGION_FAULT_LANDS_S)

    # --- snapshots ------------------------------------------------------------------------
    def sweep(self, trials: list[Any], also: str | None = None) -> None:
        """Free the placement groups of multi-worker trials that stopped running (``also``:
        one that is being restarted after an error)."""
        if self.groups.groups:
            running = {trial_id_of(t) for t in trials if t.status == "RUNNING"} - {also}
            self.groups.sweep(running)

    def maybe_snapshot(self, trials: list[Any]) -> None:
        if snapshot_due(self.dirty, time.monotonic() - self.last_snapshot_t, self.hpo.snapshot_interval_s):
            self.snapshot(trials)

    @staticmethod
    def _source(trial: Any) -> str | None:
        """The scratch folder of the trial's newest checkpoint as Tune registered it; None
        while it has none (it stands on the one it was restored from)."""
        latest = latest_checkpoint(trial)
        return None if latest is None or latest.checkpoint is None else latest.checkpoint.path

    def _checkpoint_files(self, trial_id: str, source: str | None) -> dict[str, bytes] | None:
        """The files of the trial's checkpoint at ``source``, or the one it was restored
        from; None when it has none."""
        return self.plan.checkpoints.get(trial_id) if source is None else read_trial_checkpoint(source)

    def _unmoved(self, record: TrialRecord, source: str | None, live: bool = True) -> TrialRef | None:
        """The trial's checkpoint committed already, when it has not moved since: the one
        this attempt committed (or adopted from the restore) from the files at ``source``;
        for a finished trial carried over (not ``live``: this attempt does not run it), the
        one the attempt that finished it committed. Named again as it is, its files
        neither read from scratch nor hashed."""
        tid, at = record.trial_id, record.checkpoint_iteration
        made = self.uploads.trials.sources.get(tid)
        if made is not None and made[0].iteration == at and made[1] == source:
            return made[0]
        ref = None if live or record.status != TERMINATED else self.restored_refs.get(tid)
        return ref if ref is not None and ref.iteration == at else None

    def snapshot(self, trials: list[Any], final: bool = False) -> None:
        records = self.records(trials)
        step = search_step(records)
        self.step = max(self.step, step)
        if step <= self.last_snapshot_step:
            return  # nothing new since the last one (or since the restored one)
        checkpoints: dict[str, tuple[int, dict[str, bytes]]] = {}
        # Every trial's newest checkpoint is named, a finished one's too (its final weights,
        # what result.json's best_trial.checkpoint points at); each is read and uploaded once.
        named: dict[str, TrialRef] = {}
        sources: dict[str, str | None] = {}  # where each trial's files were read from (None: the restore)
        by_id = {r.trial_id: r for r in records}
        live = {trial_id_of(t) for t in trials}
        for record in records:
            if record.trial_id not in live and (ref := self._unmoved(record, None, live=False)) is not None:
                named[record.trial_id] = ref  # carried over, not run by this attempt
        for t in trials:
            record = by_id[trial_id_of(t)]
            if record.checkpoint_iteration is None:
                continue
            source = self._source(t)
            if (ref := self._unmoved(record, source)) is not None:
                named[record.trial_id] = ref
                continue
            sources[record.trial_id] = source
            try:
                files = self._checkpoint_files(record.trial_id, source)
            except FileNotFoundError:
                if record.status == TERMINATED:
                    continue  # its final weights are gone from scratch: it never runs again
                # A checkpoint Tune registered and has since removed from scratch: this step's
                # snapshot would not be whole; the next one is taken at the next step.
                return
            if files is not None:
                checkpoints[record.trial_id] = (record.checkpoint_iteration, files)
        for record in self.plan.carried:
            carried = self.plan.checkpoints.get(record.trial_id)
            if record.trial_id in named or record.checkpoint_iteration is None:
                continue
            if record.status != TERMINATED and carried is not None:
                checkpoints[record.trial_id] = (record.checkpoint_iteration, carried)
        rungs = None if self.rungs is None else self.rungs.to_json()
        log = None if self.proposer is None else [list(e) for e in self.proposer.events]
        exploits = None if self.exploits is None else list(self.exploits)

        def packed(refs: dict[str, TrialRef]) -> bytes:
            return pack(SearchSnapshot(records, rungs, {}, log, exploits, refs))

        extra = {"kind": "hpo_experiment", "search_step": step, "trials": [r.to_json() for r in records]}
        finished = frozenset(r.trial_id for r in records if r.status == TERMINATED)
        self.uploads.submit(SnapshotJob(step, checkpoints, packed, extra, named, finished, sources))
        self.last_snapshot_step, self.last_snapshot_t = step, time.monotonic()
        self.snapshot_records = records
        self.dirty = False
        self.snapshots += 1
        if final:
            self.uploads.wait()
        self.report(trials, records, force=True)
