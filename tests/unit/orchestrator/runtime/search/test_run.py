"""Nothing in a search snapshot can run code. A snapshot planted in a store is never even
read, whatever step it claims; and one that verifies (a zombie's, or a bug's) holds only
data: a pickle in it, where Tune's ``tuner.pkl`` used to be or as a trial's tensors, is
refused by name and never loaded."""

from __future__ import annotations

import io
import json
import os
import pickle
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.hpo import sample_configs
from orchestrator.runtime.search.restore import restore_search
from orchestrator.runtime.search.snapshot import ARCHIVE, FORMAT, Expected, SearchSnapshot, SnapshotError, pack
from orchestrator.runtime.search.trial import load_tensors
from orchestrator.wire.control import ControlChannel
from recovery.keys import controller_keys
from recovery.manifest import MANIFEST_NAME
from recovery.store import CheckpointStore
from tests.support.runs import loop_spec
from tests.support.stores import TEST_KEY

pytestmark = pytest.mark.unit
RUN = "search"
HPO = {
    "search_space": {"lr": "loguniform 0.01 0.2"},
    "num_samples": 2,
    "max_t": 6,
    "scheduler": "fifo",
    "grace_period": 2,
    "reduction_factor": 2,
}
CONFIGS = sample_configs(HPO["search_space"], 2, seed=0)


class Payload:
    """What an attacker pickles: loading it runs a command (here: touches a marker)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def archive(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def plant(store: CheckpointStore, step: int, data: bytes, signature: str) -> None:
    """A snapshot committed by someone with write access to the store: files and a
    manifest whose digests are right, with ``signature`` in place of the run's."""
    manifest = store.commit(RUN, step, attempt=1, files=[store.put(RUN, step, ARCHIVE, data, 1)])
    forged = replace(manifest, signature=signature)
    store.fs.pipe_file(f"{store.step_path(RUN, step)}/{MANIFEST_NAME}", forged.to_json().encode())


@pytest.mark.parametrize("how", ["unsigned", "another run's key", "a forged signature"])
def test_a_planted_search_snapshot_is_never_unpacked(tmp_path: Path, how: str) -> None:
    marker = tmp_path / "ran"
    evil = archive({"search/tuner.pkl": pickle.dumps(Payload(marker)), "search/scheduler_state.pkl": b"x"})
    spec = search_spec(tmp_path)
    ours = CheckpointStore(spec.store_url, region="r", key=TEST_KEY)
    legit = pack(SearchSnapshot(trials=[]))
    ours.commit(RUN, 20, attempt=1, files=[ours.put(RUN, 20, ARCHIVE, legit, 1)])

    if how == "another run's key":
        planter = CheckpointStore(spec.store_url, region="r", key=controller_keys(b"\1" * 32, RUN))
        planter.commit(RUN, 900, attempt=1, files=[planter.put(RUN, 900, ARCHIVE, evil, 1)])
    else:
        planter = CheckpointStore(spec.store_url, region="r", key=TEST_KEY)
        plant(planter, 900, evil, signature="" if how == "unsigned" else "ab" * 32)

    control = ControlChannel(spec.control_url)
    step, url, snapshot = restore_search(spec, control, CONFIGS)

    assert step == 20 and url is not None and url.endswith("/step-20-g1")
    assert snapshot == SearchSnapshot(trials=[])
    assert not marker.exists()
    skipped = [e for e in control.read_events(spec.generation, set()) if e["type"] == "checkpoint_skipped"]
    assert [e["step"] for e in skipped] == [900]
    assert "not written by this run" in skipped[0]["reason"]
    # The payload is real: loading it is what the restore never did.
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()


def search_spec(tmp_path: Path):  # type: ignore[no-untyped-def]
    return loop_spec(tmp_path, RUN, 2, {"name": "digits_hpo", "workload": "digits", "steps": 100, "seed": 0}, hpo=HPO)


def _payload_checkpoint(marker: Path) -> bytes:
    """A snapshot, signed with the run's own key, whose trial state is a pickle payload."""
    from orchestrator.hpo import TrialRecord

    record = TrialRecord("trial_00000", "RUNNING", iteration=2, config=CONFIGS[0], checkpoint_iteration=2)
    evil = pickle.dumps(Payload(marker))
    return pack(
        SearchSnapshot([record], None, {"trial_00000": {"model.pt": evil, "optimizer.pt": evil, "state.pt": evil}})
    )


@pytest.mark.parametrize("what", ["Tune's tuner.pkl", "a trial's tensors"])
def test_a_pickle_in_a_snapshot_this_run_signed_never_runs(tmp_path: Path, what: str) -> None:
    marker = tmp_path / "ran"
    spec = search_spec(tmp_path)
    ours = CheckpointStore(spec.store_url, region="r", key=TEST_KEY)
    if what == "Tune's tuner.pkl":
        data = archive({"search.json": b"{}", "search/tuner.pkl": pickle.dumps(Payload(marker))})
        words = "search/tuner.pkl"
    else:
        data = _payload_checkpoint(marker)
        words = "trial_00000's checkpoint state does not load (UnpicklingError)"
    ours.commit(RUN, 30, attempt=1, files=[ours.put(RUN, 30, ARCHIVE, data, 1)])

    with pytest.raises(SnapshotError) as err:
        restore_search(spec, ControlChannel(spec.control_url), CONFIGS)
    assert words in str(err.value)
    assert not marker.exists()
    # A trial loads its model and optimizer the same way: as tensors only.
    with pytest.raises(pickle.UnpicklingError):
        load_tensors(pickle.dumps(Payload(marker)))
    assert not marker.exists()


@pytest.mark.parametrize("where", ["a member of its own", "the searcher's log"])
def test_an_optuna_searchers_state_as_a_pickle_in_a_signed_snapshot_never_runs(tmp_path: Path, where: str) -> None:
    """Tune's OptunaSearch saves its study as a pickle; ours is a log of plain events."""
    marker = tmp_path / "ran"
    spec = loop_spec(
        tmp_path,
        RUN,
        2,
        {"name": "digits_hpo", "workload": "digits", "steps": 100, "seed": 0},
        hpo={**HPO, "search_alg": "optuna"},
    )
    evil = pickle.dumps(Payload(marker))
    state = {"format": FORMAT, "trials": [], "rungs": None, "searcher": []}
    if where == "a member of its own":
        data = archive({"search.json": json.dumps(state).encode(), "search/searcher-state.pkl": evil})
        words = "search/searcher-state.pkl"
    else:
        data = archive({"search.json": json.dumps({**state, "searcher": evil.hex()}).encode()})
        words = "the searcher's log is not a list"
    ours = CheckpointStore(spec.store_url, region="r", key=TEST_KEY)
    ours.commit(RUN, 30, attempt=1, files=[ours.put(RUN, 30, ARCHIVE, data, 1)])
    expected = Expected(2, None, HPO["search_space"], proposes=True)
    with pytest.raises(SnapshotError) as err:
        restore_search(spec, ControlChannel(spec.control_url), expected)
    assert words in str(err.value)
    assert not marker.exists()


def test_multi_worker_trials_run_as_many_at_once_as_the_cluster_holds() -> None:
    from orchestrator.runtime.search.run import concurrent_trials
    from orchestrator.wire.sections import HpoSection, TrialSection

    hpo = HpoSection(max_concurrent=4)
    assert concurrent_trials(hpo, 2.0) == 4  # in-process trials: Tune counts their CPUs itself
    wide = replace(hpo, trial=TrialSection(workers=2, cpus_per_worker=1.0))
    assert [concurrent_trials(wide, cpus) for cpus in (2.0, 3.0, 4.0, 16.0)] == [1, 1, 2, 4]
    assert concurrent_trials(replace(wide, trial=TrialSection(workers=4)), 2.0) == 1


def test_a_finished_searchs_last_progress_is_out_of_the_steps_it_took() -> None:
    """6 trials to max_t 6 plan 42 search steps; ASHA stopped four at iteration 2, so the
    search took 26 (each trial's iterations and its end): its last progress, which the
    foreground run and action=watch print, is 26/26, not 26/42."""
    from types import SimpleNamespace

    from orchestrator.hpo.trials import TERMINATED, TrialRecord
    from orchestrator.runtime.search.run import finish
    from orchestrator.wire.sections import HpoSection
    from recovery.detection import EXIT_OK

    class Control:
        def __init__(self) -> None:
            self.calls: list[tuple[str, dict[str, Any]]] = []

        def progress(self, generation: int, **kw: Any) -> None:
            self.calls.append(("progress", kw))

        def final(self, generation: int, **kw: Any) -> None:
            self.calls.append(("final", kw))

        def event(self, generation: int, kind: str, **kw: Any) -> None:
            self.calls.append((kind, kw))

    records = [
        TrialRecord(f"trial_0000{i}", TERMINATED, it, {"lr": 0.1}, {"accuracy": 0.5 + i / 100})
        for i, it in enumerate([6, 6, 2, 2, 2, 2])
    ]
    driver = SimpleNamespace(
        hpo=HpoSection(enabled=True, max_t=6, num_samples=6),
        snapshot_records=records,
        plan=SimpleNamespace(carried=[]),
        configs=[],
        uploads=SimpleNamespace(wait=lambda: None),
        last_checkpoint="s3://b/r/search-26",
        snapshots=3,
        exploits=None,
        total=42,
    )
    control = Control()
    assert finish(SimpleNamespace(generation=1), control, driver, []) == EXIT_OK
    (progress,) = [kw for what, kw in control.calls if what == "progress"]
    (final,) = [kw for what, kw in control.calls if what == "final"]
    assert (progress["step"], progress["total"]) == (26, 26) and final["final_step"] == 26


@pytest.mark.parametrize(
    ("job", "hpo", "data", "reused"),
    [
        ({"workload": "digits"}, {}, {}, True),  # a built-in workload, in the trial's process
        ({"workload": "mypkg.models:Net"}, {}, {}, False),  # a user's module-level state stays its trial's
        ({"workload": "mypkg.models:Net"}, {"reuse_processes": "on"}, {}, True),
        ({"workload": "digits"}, {"reuse_processes": "off"}, {}, False),
        ({"workload": "", "train_func": "mypkg.train:fn"}, {}, {}, True),  # a Ray Train trial's workers are new
        ({"workload": "mypkg.models:Net"}, {"trial": {"workers": 2}}, {}, True),
        ({"workload": "mypkg.models:Net"}, {}, {"loader": "ray_data"}, True),
    ],
)
def test_a_trials_process_goes_on_to_the_next_trial_only_where_it_runs_no_user_code(
    tmp_path: Path, job: dict[str, Any], hpo: dict[str, Any], data: dict[str, Any], reused: bool
) -> None:
    from orchestrator.runtime.search.run import reuse_trial_processes

    spec = loop_spec(tmp_path, RUN, 1, {"name": "s", "seed": 0, **job}, hpo={**HPO, **hpo}, data=data)
    assert reuse_trial_processes(spec) is reused
