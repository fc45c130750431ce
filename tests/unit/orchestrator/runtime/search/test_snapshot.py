"""A search snapshot is plain data: packed, read back and checked against the run's search,
and what a resumed search does with each of its trials."""

from __future__ import annotations

import io
import json
import re
import tarfile
from dataclasses import replace

import pytest

from orchestrator.hpo import TrialRecord, asha_rungs, sample_configs, trial_key
from orchestrator.runtime.search.snapshot import (
    Expected,
    SearchSnapshot,
    SnapshotError,
    func_files,
    func_iteration,
    func_parts,
    pack,
    resume_plan,
    unpack,
)
from orchestrator.runtime.search.trial_store import TrialRef

pytestmark = pytest.mark.unit
SPACE = {"lr": "loguniform 0.01 0.2", "hidden_size": "choice 32 64 128"}
CONFIGS = sample_configs(SPACE, 4, seed=0)
RUNGS = asha_rungs(6, 2, 2)
CKPT = {"model.pt": b"m", "optimizer.pt": b"o", "state.pt": b"s"}
FUNCTIONS = Expected(len(CONFIGS), CONFIGS, functions=True)


def record(i: int, status: str, iteration: int = 0, checkpoint: int | None = None) -> TrialRecord:
    return TrialRecord(
        trial_key(i),
        status,
        iteration=iteration,
        config=dict(CONFIGS[i]),
        metrics={"accuracy": 0.5 + i / 10, "eval_loss": 1.0} if iteration else {},
        checkpoint_iteration=checkpoint,
        weights_sha256="ab" * 32 if iteration else None,
    )


def snapshot() -> SearchSnapshot:
    return SearchSnapshot(
        trials=[
            record(0, "TERMINATED", 6, 6),
            record(1, "TERMINATED", 2, 2),
            record(2, "RUNNING", 4, 3),
            record(3, "ERROR", 1, 1),
        ],
        rungs={"2": {trial_key(0): 0.9, trial_key(1): 0.4, trial_key(2): 0.8}, "4": {trial_key(0): 0.95}},
        checkpoints={trial_key(2): CKPT, trial_key(3): CKPT},
    )


def tar(files: dict[str, bytes], kind: bytes = tarfile.REGTYPE) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.type = len(data), kind
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return {m.name: t.extractfile(m).read() for m in t}  # type: ignore[union-attr]


def test_a_snapshot_reads_back_as_it_was_packed() -> None:
    snap = snapshot()
    data = pack(snap)
    assert sorted(members(data)) == [
        "search.json",
        *(f"trials/{t}/{f}" for t in (trial_key(2), trial_key(3)) for f in ("model.pt", "optimizer.pt", "state.pt")),
    ]
    assert unpack(data, CONFIGS, 6, RUNGS) == snap
    fifo = replace(snap, rungs=None)
    assert unpack(pack(fifo), CONFIGS, 6, None) == fifo


def _state(**change: object) -> bytes:
    files = members(pack(snapshot()))
    state = json.loads(files["search.json"])
    for path, value in change.items():
        target = state
        *parents, last = path.split("__")
        for p in parents:
            target = target[int(p)] if isinstance(target, list) else target[p]
        if value is KeyError:
            del target[last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    files["search.json"] = json.dumps(state).encode()
    return tar(files)


def _without(name: str) -> bytes:
    return tar({k: v for k, v in members(pack(snapshot())).items() if k != name})


def _with(name: str, data: bytes = b"x") -> bytes:
    return tar({**members(pack(snapshot())), name: data})


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "not a tar archive"),
        (b"\x00" * 700, "no search.json"),
        (b"plain text, not a tar" * 40, "not a tar archive"),
        (_without("search.json"), "no search.json"),
        (_with("search/tuner.pkl"), "never has"),
        (_with("trials/trial_00002/extra.pkl"), "never has"),
        (_with("../escape"), "never has"),
        (_with("/etc/passwd"), "never has"),
        (tar({"search.json": b"{}", "trials/trial_00002/model.pt": b""}, tarfile.SYMTYPE), "not a plain file"),
        (tar({"search.json": b"\xff\xfe"}), "not JSON"),
        (tar({"search.json": b"[]"}), "an object of format, trials, rungs"),
        (_state(format="tune/2"), "format"),
        (_state(trials={}), "not a list"),
        (_state(trials__0=[1, 2]), "not a trial record"),
        (_state(trials__0__extra=1), "not a trial record"),
        (_state(trials__0__status=KeyError), "not a trial record"),
        (_state(trials__0__trial_id="trial_00009"), "not one of this search's 4 trials"),
        (_state(trials__0__trial_id="../../x"), "not one of this search's 4 trials"),
        (_state(trials__1=record(0, "TERMINATED", 6, 6).to_json()), "names a trial twice"),
        (_state(trials__0__config={"lr": 9.0, "hidden_size": 32}), "differs from the values"),
        (_state(trials__0__status="EVIL"), "status"),
        (_state(trials__0__iteration=7), "iteration is not an integer in [0, 6]"),
        (_state(trials__0__iteration=True), "iteration"),
        (_state(trials__0__checkpoint_iteration=0), "checkpoint_iteration"),
        (_state(trials__0__metrics={"a loss": 1.0}), "metrics"),
        (_state(trials__0__metrics={f"m{i}": 1.0 for i in range(33)}), "metrics"),
        (_state(trials__0__metrics={"accuracy": "1"}), "metrics.accuracy"),
        (_state(trials__0__error=["x"]), "error"),
        (_state(trials__0__error="e" * 2001), "error"),
        (_state(trials__0__weights_sha256="not hex"), "weights_sha256"),
        (_state(trials__2__checkpoint_iteration=None), "records say has none"),
        (_without("trials/trial_00002/state.pt"), "lacks some of"),
        (_state(trials__3__checkpoint_iteration=None), "records say has none"),
        (_without("trials/trial_00003/model.pt"), "lacks some of"),
        (_state(rungs={"2": {}}), "rungs are not the run's"),
        (_state(rungs=None), "rungs are not the run's"),
        (_state(rungs__2={"trial_00009": 0.5}), "names trials the snapshot does not have"),
        (_state(rungs__2={trial_key(0): "high"}), "not a number"),
        (_state(rungs__2={trial_key(0): 1e999}), "not a number"),
    ],
)
def test_a_snapshot_that_is_not_this_searchs_is_refused_in_one_line(data: bytes, words: str) -> None:
    with pytest.raises(SnapshotError) as err:
        unpack(data, CONFIGS, 6, RUNGS)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_checkpoint_missing_for_a_trial_that_may_run_is_refused() -> None:
    files = members(pack(snapshot()))
    for name in [n for n in files if n.startswith("trials/trial_00002/")]:
        del files[name]
    with pytest.raises(SnapshotError, match=r"trial_00002 has a checkpoint, and the snapshot names none"):
        unpack(tar(files), CONFIGS, 6, RUNGS)


def test_rungs_in_a_fifo_search_are_refused() -> None:
    with pytest.raises(SnapshotError, match="not ASHA"):
        unpack(pack(snapshot()), CONFIGS, 6, None)


# --- what a resumed search does with each trial --------------------------------------------


def test_finished_trials_stay_finished_and_the_rest_go_on_from_their_checkpoints() -> None:
    plan = resume_plan(snapshot(), 4, resume_errored=True, restart_errored=False)
    assert plan.run == [2, 3]
    assert [t.trial_id for t in plan.carried] == [trial_key(0), trial_key(1)]
    assert sorted(plan.restored) == [trial_key(2), trial_key(3)]
    assert sorted(plan.checkpoints) == [trial_key(2), trial_key(3)]


def test_errored_trials_restart_or_stay_errored_as_configured() -> None:
    restart = resume_plan(snapshot(), 4, resume_errored=False, restart_errored=True)
    assert restart.run == [2, 3] and trial_key(3) not in restart.checkpoints and trial_key(3) not in restart.restored
    stay = resume_plan(snapshot(), 4, resume_errored=False, restart_errored=False)
    assert stay.run == [2] and [t.trial_id for t in stay.carried] == [trial_key(0), trial_key(1), trial_key(3)]


def test_trials_the_snapshot_never_saw_start_and_no_snapshot_runs_them_all() -> None:
    snap = snapshot()
    snap.trials = snap.trials[:2]
    snap.checkpoints = {}
    assert resume_plan(snap, 4, True, False).run == [2, 3]
    fresh = resume_plan(None, 4, True, False)
    assert fresh.run == [0, 1, 2, 3] and not fresh.carried and not fresh.checkpoints


# --- a searcher that proposes trials (hpo.search_alg=optuna) ---------------------------------------


def proposed_snapshot() -> tuple[SearchSnapshot, Expected]:
    from orchestrator.hpo.replay import OptunaReplay

    proposer = OptunaReplay(SPACE, 0, "max", 4)
    trials = []
    for _ in range(2):
        index, values = proposer.ask()
        trials.append(TrialRecord(trial_key(index), "RUNNING", config=values))
    proposer.tell(0, 0.5)
    trials[0] = replace(trials[0], status="TERMINATED", iteration=6, metrics={"accuracy": 0.5})
    snap = SearchSnapshot(trials=trials, rungs=None, searcher=proposer.events)
    return snap, Expected(4, None, SPACE, proposes=True)


def test_a_proposing_searchers_snapshot_reads_back_with_its_log() -> None:
    snap, expected = proposed_snapshot()
    back = unpack(pack(snap), expected, 6, None)
    assert back.searcher == snap.searcher and back.trials == snap.trials


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda s: s.trials[1].config.update({"job.lr": 5.0}), "config differs"),
        (lambda s: s.trials[1].config.update({"momentum": 0.9}), "config differs"),
        (lambda s: s.trials[1].config.update({"hidden_size": 48}), "config differs"),
        (lambda s: s.searcher.append(["tell", 0, 0.5]), "told before"),
        (lambda s: setattr(s, "searcher", None), "a searcher's log goes with"),
    ],
)
def test_a_proposing_searchers_snapshot_that_is_not_this_searchs_is_refused(change, words: str) -> None:
    snap, expected = proposed_snapshot()
    change(snap)
    with pytest.raises(SnapshotError, match=words):
        unpack(pack(snap), expected, 6, None)


def test_a_searchers_log_in_a_random_search_is_refused() -> None:
    snap = replace(snapshot(), searcher=[["ask", 0]])
    with pytest.raises(SnapshotError, match="a searcher's log goes with"):
        unpack(pack(snap), CONFIGS, 6, RUNGS)


# --- population-based training (hpo.scheduler=pbt) -------------------------------------------------


def test_pbts_decisions_read_back_and_an_explored_trials_values_are_any_of_the_space() -> None:
    from orchestrator.hpo.pbt import Exploit

    values = {"lr": 0.0123, "hidden_size": 128}
    snap = replace(snapshot(), rungs=None, exploits=[Exploit(trial_key(2), trial_key(0), 4, 4, values)])
    snap.trials[2] = replace(snap.trials[2], config=values)
    evolves = Expected(len(CONFIGS), CONFIGS, SPACE, evolves=True)
    back = unpack(pack(snap), evolves, 6, None)
    assert back.exploits == snap.exploits and back.trials[2].config == values
    # Without PBT an explored trial's values are not this search's; nor are PBT's decisions.
    with pytest.raises(SnapshotError, match="config differs"):
        unpack(pack(snap), CONFIGS, 6, None)
    with pytest.raises(SnapshotError, match="PBT's decisions go with"):
        unpack(pack(replace(snap, trials=snapshot().trials)), CONFIGS, 6, None)
    with pytest.raises(SnapshotError, match="PBT's decisions go with"):
        unpack(pack(replace(snap, exploits=None)), evolves, 6, None)
    outside = replace(snap, exploits=[Exploit(trial_key(2), trial_key(0), 4, 4, {**values, "hidden_size": 48})])
    with pytest.raises(SnapshotError, match="not a value of its distribution"):
        unpack(pack(outside), evolves, 6, None)


def test_a_multi_worker_trials_checkpoint_carries_each_ranks_rng_states() -> None:
    wide = {**CKPT, "rng-1.pt": b"r1", "rng-0.pt": b"r0"}
    snap = replace(snapshot(), checkpoints={trial_key(2): wide, trial_key(3): CKPT})
    data = pack(snap)
    assert [n for n in members(data) if "trial_00002" in n][-2:] == [
        "trials/trial_00002/rng-0.pt",
        "trials/trial_00002/rng-1.pt",
    ]
    assert unpack(data, CONFIGS, 6, RUNGS) == snap
    # A rank's file missing (or one of a rank that never was) is no checkpoint of ours.
    gap = replace(snap, checkpoints={trial_key(2): {**CKPT, "rng-1.pt": b"r1"}, trial_key(3): CKPT})
    with pytest.raises(SnapshotError, match=r"has RNG states of ranks \[1\]"):
        unpack(pack(gap), CONFIGS, 6, RUNGS)
    with pytest.raises(SnapshotError, match="which a search snapshot never has"):
        unpack(_with("trials/trial_00002/rng-x.pt"), CONFIGS, 6, RUNGS)


def test_a_train_functions_trial_checkpoint_is_its_folder_and_the_reports_it_stands_after() -> None:
    """Record 2 stands after 3 reports, record 3 after 1: their folders travel as the
    function wrote them (paths inside the folder only), beside func.json."""
    two = func_parts(3, {"checkpoint.pt": b"c", "shards/rank-0.bin": b"s0"})
    snap = replace(snapshot(), checkpoints={trial_key(2): two, trial_key(3): func_parts(1, {"a.pt": b"a"})})
    data = pack(snap)
    assert [n for n in members(data) if "trial_00002" in n] == [
        "trials/trial_00002/func.json",
        "trials/trial_00002/files/checkpoint.pt",
        "trials/trial_00002/files/shards/rank-0.bin",
    ]
    back = unpack(data, FUNCTIONS, 6, RUNGS)
    assert back == snap
    # A search of a workload class reads no function's folder, and the other way round.
    with pytest.raises(SnapshotError, match="is not a workload's state, which this search's are"):
        unpack(data, CONFIGS, 6, RUNGS)
    with pytest.raises(SnapshotError, match="is not a train function's folder, which this search's are"):
        unpack(pack(snapshot()), FUNCTIONS, 6, RUNGS)
    assert func_iteration(back.checkpoints[trial_key(2)]) == 3
    assert func_files(back.checkpoints[trial_key(2)]) == {"checkpoint.pt": b"c", "shards/rank-0.bin": b"s0"}


@pytest.mark.parametrize(
    ("files", "words"),
    [
        # A path out of the folder, or not a path at all.
        ({"trials/trial_00002/files/../../x": b"x"}, "which a search snapshot never has"),
        ({"trials/trial_00002/files//x": b"x"}, "which a search snapshot never has"),
        ({"trials/trial_00002/files/MANIFEST.json": b"{}"}, "which a search snapshot never has"),
        # The reports it stands after: not the record's, not a count, not JSON, too big.
        ({"trials/trial_00002/func.json": b'{"iteration": 2}'}, "stands after 2 reports; its record says 3"),
        ({"trials/trial_00002/func.json": b'{"iteration": 0}'}, "with N >= 1"),
        ({"trials/trial_00002/func.json": b'{"iteration": true}'}, "with N >= 1"),
        ({"trials/trial_00002/func.json": b'{"iteration": 3, "x": 1}'}, "with N >= 1"),
        ({"trials/trial_00002/func.json": b"\x80\x04K\x03."}, "with N >= 1"),
        ({"trials/trial_00002/func.json": b'{"iteration": 3}' + b" " * 5000}, "with N >= 1"),
        # A function's files without its state, or beside a workload's.
        ({"trials/trial_00002/func.json": None}, "is not a train function's folder"),
        ({"trials/trial_00002/model.pt": b"m"}, "mixes a function's files and a workload's"),
    ],
)
def test_a_function_trials_checkpoint_that_is_not_ours_is_refused(files: dict, words: str) -> None:
    ours = {trial_key(2): func_parts(3, {"c.pt": b"c"}), trial_key(3): func_parts(1, {"c.pt": b"c"})}
    good = members(pack(replace(snapshot(), checkpoints=ours)))
    assert unpack(tar(good), FUNCTIONS, 6, RUNGS).checkpoints == ours
    for name, data in files.items():
        if data is None:
            good.pop(name)
        else:
            good[name] = data
    with pytest.raises(SnapshotError, match=re.escape(words)):
        unpack(tar(good), FUNCTIONS, 6, RUNGS)


def test_a_train_functions_checkpoint_read_from_tunes_folder(tmp_path) -> None:
    from orchestrator.runtime.search.func_trial import write_func_checkpoint
    from orchestrator.runtime.search.trial import read_trial_checkpoint

    reported = tmp_path / "reported"
    (reported / "sub").mkdir(parents=True)
    (reported / "model.pt").write_bytes(b"m")
    (reported / "sub" / "opt.pt").write_bytes(b"o")
    tune_folder = tmp_path / "tune"
    tune_folder.mkdir()
    write_func_checkpoint(str(reported), 4, str(tune_folder))
    parts = read_trial_checkpoint(str(tune_folder))
    assert parts == func_parts(4, {"model.pt": b"m", "sub/opt.pt": b"o"})


# --- trial checkpoints named, not held: each a signed checkpoint of its own in the store -----


def named() -> SearchSnapshot:
    refs = {trial_key(2): TrialRef(3, 2, "ab" * 32), trial_key(3): TrialRef(1, 1, "cd" * 32)}
    return replace(snapshot(), checkpoints={}, refs=refs)


def test_a_snapshot_that_names_its_trials_checkpoints_holds_no_weights_and_reads_back() -> None:
    data = pack(named())
    assert list(members(data)) == ["search.json"]
    back = unpack(data, CONFIGS, 6, RUNGS)
    assert back.refs == named().refs and back.checkpoints == {}
    plan = resume_plan(back, 4, resume_errored=True, restart_errored=False)
    assert sorted(plan.restored) == [trial_key(2), trial_key(3)]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda c: [c], "checkpoints is not an object"),
        (lambda c: {**c, trial_key(0): c[trial_key(2)]}, "trial_00000's checkpoint at iteration 3; its record says 6"),
        (lambda c: {**c, trial_key(9): c[trial_key(2)]}, "names a checkpoint of trial_00009, which its records say"),
        (lambda c: {**c, trial_key(2): {**c[trial_key(2)], "iteration": 2}}, "iteration 2; its record says 3"),
        (lambda c: {**c, trial_key(2): {**c[trial_key(2)], "digest": "x"}}, "trial_00002 digest is not a sha256"),
        (lambda c: {**c, trial_key(2): "../../other-run"}, "trial_00002 is not an object"),
        (lambda c: {k: v for k, v in c.items() if k != trial_key(3)}, "trial_00003 has a checkpoint, and the snapshot"),
    ],
)
def test_a_snapshot_naming_a_checkpoint_it_cannot_have_is_refused(change, words: str) -> None:
    files = members(pack(named()))
    state = json.loads(files["search.json"])
    state["checkpoints"] = change(state["checkpoints"])
    files["search.json"] = json.dumps(state).encode()
    with pytest.raises(SnapshotError, match=re.escape(words)):
        unpack(tar(files), CONFIGS, 6, RUNGS)


def test_a_trial_held_in_the_archive_and_named_in_the_store_is_refused() -> None:
    files = members(pack(replace(named(), checkpoints={trial_key(2): CKPT})))
    with pytest.raises(SnapshotError, match="holds a checkpoint of trial_00002 and names another"):
        unpack(tar(files), CONFIGS, 6, RUNGS)
