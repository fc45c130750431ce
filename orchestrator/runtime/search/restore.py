"""A search resumed from its newest snapshot, checked before it is believed.

The newest snapshot that verifies on the controller's lineage (narrowed by the stores'
fence) is read and checked (``snapshot.unpack``); nothing in it is unpickled, and Tune's
own pickled experiment never leaves the cluster. The attempt then starts a new Tune
experiment over the trials that remain (``snapshot.resume_plan``): finished trials stay
finished, unfinished ones continue from their checkpoint (each reports the iteration it
restored), errored ones as ``recovery.resume_errored`` / ``restart_errored`` say. ASHA's
recorded values are restored as data (AshaRungs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.hpo import TERMINATED, trial_key
from orchestrator.hpo.replay import ASK, OptunaReplay, ReplayError
from orchestrator.runtime.loop.worker import restore_rule, spec_stores
from orchestrator.runtime.search.section import rung_list, search_of
from orchestrator.runtime.search.snapshot import (
    ARCHIVE,
    Expected,
    SearchSnapshot,
    SnapshotError,
    check_parts,
    is_func_parts,
    unpack,
)
from orchestrator.runtime.search.trial import load_tensors
from orchestrator.runtime.search.trial_store import fetch_trial_from
from orchestrator.wire import runkey
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.sections import HpoSection
from orchestrator.wire.spec import RuntimeSpec
from recovery.fencing import Admits
from recovery.replication import load_newest
from recovery.store import CheckpointStore


def check_trial_checkpoints(snapshot: SearchSnapshot) -> None:
    """Each trial checkpoint in the snapshot loads and is at the iteration its record
    says; else SnapshotError (one line)."""
    recorded = {t.trial_id: t.checkpoint_iteration for t in snapshot.trials}
    for trial_id, parts in snapshot.checkpoints.items():
        if is_func_parts(parts):
            continue  # a train function's: unpack checked its state; its files are the function's own
        try:
            state = load_tensors(parts["state.pt"])
            iteration = int(state["iteration"])
        except Exception as exc:  # the bytes are ours (signed), yet not a checkpoint we write
            raise SnapshotError(f"{trial_id}'s checkpoint state does not load ({type(exc).__name__})") from None
        expected = recorded[trial_id]
        if iteration != expected:
            raise SnapshotError(f"{trial_id}'s checkpoint is at iteration {iteration}, its record says {expected}")


def restore_search(
    spec: RuntimeSpec, control: ControlChannel, configs: list[dict[str, Any]] | Expected
) -> tuple[int, str | None, SearchSnapshot | None]:
    """The newest verified snapshot, checked: (its step, its URL, its contents), or (0, None,
    None). A snapshot that verifies but does not check raises SnapshotError (one line)."""
    stores = spec_stores(spec, runkey.require())

    def skipped(store: CheckpointStore, step: int, reason: str) -> None:
        control.event(spec.generation, "checkpoint_skipped", step=step, reason=reason, region=store.region)

    def store_failed(store: CheckpointStore, error: str) -> None:
        control.event(spec.generation, "restore_store_skipped", region=store.region, error=error[:500])

    lineage, usable = restore_rule(spec, control, stores)
    hpo = search_of(spec)
    found = newest_whole(spec.run_id, usable, skipped, store_failed, lineage, configs, hpo.max_t, rung_list(hpo))
    if found is None:
        return 0, None, None
    store, step, snapshot = found
    return step, store.checkpoint_url(spec.run_id, step), snapshot


def newest_whole(
    run_id: str,
    stores: list[CheckpointStore],
    skipped: Callable[[CheckpointStore, int, str], None],
    store_failed: Callable[[CheckpointStore, str], None],
    lineage: Admits | None,
    configs: list[dict[str, Any]] | Expected,
    max_t: int,
    rungs: list[int] | None,
) -> tuple[CheckpointStore, int, SearchSnapshot] | None:
    """The newest snapshot that verifies, checks, and whose named trial checkpoints some
    store holds whole, read into it: (its store, its step, it); or None. One whose named
    checkpoint is in no store whole is ``skipped`` for the next older one."""
    passed: list[tuple[str, int]] = []
    while True:
        # The snapshot's archive is kept as it is verified: read once.
        best = load_newest(
            run_id,
            stores,
            skipped,
            lineage=lineage,
            exclude=passed,
            on_store_error=store_failed,
            keep=lambda name: name == ARCHIVE,
        )
        if best is None:
            return None
        store, m = best.store, best.manifest
        archive = best.files[ARCHIVE] if ARCHIVE in best.files else store.read(m, ARCHIVE)
        snapshot = unpack(archive, configs, max_t, rungs)
        # The snapshot's own store first: where its trials' checkpoints were committed with it.
        order = [store, *(s for s in stores if s is not store)]
        missing = read_trials(snapshot, run_id, order, functions_of(configs))
        if missing is None:
            check_trial_checkpoints(snapshot)
            return store, m.step, snapshot
        skipped(store, m.step, missing)
        passed.append((store.region, m.step))


def functions_of(configs: list[dict[str, Any]] | Expected) -> bool:
    return isinstance(configs, Expected) and configs.functions


def read_trials(snapshot: SearchSnapshot, run_id: str, stores: list[CheckpointStore], functions: bool) -> str | None:
    """The checkpoints ``snapshot`` names of trials that may still run, read into its
    ``checkpoints`` and checked in shape (their content is checked by
    check_trial_checkpoints); None, or why the snapshot cannot be restored: a checkpoint
    it names that no store holds whole. A finished trial's is not read: it never runs again."""
    records = {t.trial_id: t for t in snapshot.trials}
    for trial_id, ref in sorted(snapshot.refs.items()):
        if records[trial_id].status == TERMINATED:
            continue
        files, why, store = fetch_trial_from(stores, run_id, trial_id, ref)
        if files is None or store is None:
            return f"its checkpoint of {trial_id} at iteration {ref.iteration} is in no store whole: {why}"[:500]
        iteration = records[trial_id].checkpoint_iteration
        assert iteration is not None  # unpack refused a reference to a trial without one
        check_parts(trial_id, files, iteration, functions, "the store's checkpoint")
        snapshot.checkpoints[trial_id] = files
        snapshot.read_from[trial_id] = store.region
    return None


def proposer_from(
    hpo: HpoSection, seed: int, snapshot: SearchSnapshot | None
) -> tuple[OptunaReplay, list[dict[str, Any]]]:
    """The searcher of a search whose trials it proposes, rebuilt from the snapshot's log,
    and the list of the trials it proposed (their recorded values, by index). Every trial
    it asked for must have a record, and every record must be one it asked for; its
    replay must propose each recorded trial's values again. SnapshotError if not."""
    events = [] if snapshot is None else snapshot.searcher or []
    records = {} if snapshot is None else {t.trial_id: t for t in snapshot.trials}
    asked = sum(1 for e in events if e[0] == ASK)
    if set(records) - {trial_key(i) for i in range(asked)}:
        raise SnapshotError("the snapshot records a trial its searcher never proposed")
    configs: list[dict[str, Any]] = []
    for index in range(asked):
        record = records.get(trial_key(index))
        if record is None:
            raise SnapshotError(f"the searcher proposed {trial_key(index)}, and the snapshot has no record of it")
        configs.append(dict(record.config))
    try:
        proposer = OptunaReplay.replay(hpo.search_space, seed, hpo.mode, hpo.num_samples, events, configs)
    except ReplayError as exc:
        raise SnapshotError(str(exc)) from None
    return proposer, configs
