"""Fencing that cannot go backwards: a fence that cannot be read is a store error, never
"no fence", and one this run's controller did not sign is ignored; generations only go
up; retention and restore follow the controller's lineage.
Real ``file://`` and ``memory://`` stores throughout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.runtime.checkpoint.background import AsyncCheckpointer, CheckpointUploadError
from recovery.fencing import FENCE_NAME, FencedError, FenceRejected, Lineage
from recovery.fsio import write_bytes
from recovery.keys import controller_keys
from recovery.manifest import Manifest
from recovery.store import CheckpointStore, StoreError, fence_path, read_fence, scan_fences
from tests.support.stores import TEST_KEY

RUN = "fwd-run"
WriteCheckpoint = Callable[..., Manifest]
TORN_FENCES = [
    pytest.param(b'{"links": [[1, 0], [2, 5', id="torn"),
    pytest.param(b"", id="empty"),
    pytest.param(b"\xff\xfe not json", id="binary"),
    pytest.param(b'{"links": [["two", 50]]}', id="not-an-integer"),
    pytest.param(b'{"links": [[2, 50], [1, 0]]}', id="going-backwards"),
    pytest.param(b'{"lineage": []}', id="no-links"),
    pytest.param(b"[1, 2]", id="not-an-object"),
]


@pytest.fixture
def store(store_url: str) -> CheckpointStore:
    return CheckpointStore(store_url, region="a", key=TEST_KEY)


def _tear(store: CheckpointStore, raw: bytes) -> None:
    """What a torn write or bit rot leaves in place of the fence."""
    write_bytes(store.fs, fence_path(store, RUN), raw)


@pytest.mark.parametrize("raw", TORN_FENCES)
def test_a_fence_that_does_not_parse_is_ignored_naming_why(store: CheckpointStore, raw: bytes) -> None:
    """Torn, rotten or planted: what no controller of this run signed neither raises nor
    lowers anything (the lineage in the spec still refuses a zombie's steps at restore)."""
    _tear(store, raw)
    with pytest.raises(FenceRejected, match=r"malformed fence|unsigned fence") as err:
        read_fence(store, RUN)
    assert "\n" not in str(err.value)
    scan = scan_fences([store], RUN)
    assert scan.generation == 0 and scan.failed == {} and list(scan.ignored) == ["a"]


def test_a_forged_fence_is_ignored_and_cannot_stop_the_live_attempt(store: CheckpointStore) -> None:
    store.write_fence(RUN, Lineage().then(1, 0).then(2, 50))
    forger = CheckpointStore(store.url, region="a", key=controller_keys(b"x" * 32, RUN))
    forger.write_fence(RUN, Lineage().then(1, 0).then(2, 50).then(9, 60))  # in place of the real one
    with pytest.raises(FenceRejected, match="does not verify"):
        read_fence(store, RUN)
    entry = store.put(RUN, 100, "model.pt", b"live")
    store.commit(RUN, 100, 2, [entry], fenced=True)
    assert store.committed_steps(RUN) == [100]


def test_no_fence_at_all_is_none_and_a_folder_in_its_place_is_ignored(tmp_path: Path) -> None:
    store = CheckpointStore(f"file://{tmp_path}/s", region="a", key=TEST_KEY)
    assert read_fence(store, RUN) is None
    (tmp_path / "s" / RUN / FENCE_NAME).mkdir(parents=True)
    with pytest.raises(FenceRejected, match="a folder"):
        read_fence(store, RUN)


def test_a_fence_that_cannot_be_read_is_a_store_error(store: CheckpointStore) -> None:
    store.write_fence(RUN, Lineage().then(1, 0))
    store.fs.cat_file = _timeout  # type: ignore[method-assign]
    with pytest.raises(StoreError, match=FENCE_NAME):
        read_fence(store, RUN)
    scan = scan_fences([store], RUN)
    assert list(scan.failed) == ["a"] and scan.ignored == {}


@pytest.mark.parametrize("raw", TORN_FENCES[:2])
def test_a_zombie_past_a_torn_fence_commits_but_is_never_restored(store: CheckpointStore, raw: bytes) -> None:
    store.write_fence(RUN, Lineage().then(1, 0).then(2, 50))
    _tear(store, raw)
    entry = store.put(RUN, 100, "model.pt", b"zombie")
    store.commit(RUN, 100, 1, [entry], fenced=True)  # nothing it can trust says no
    lineage = Lineage().then(1, 0).then(2, 50)
    assert store.latest_verified(RUN, lineage=lineage) is None
    store.write_fence(RUN, lineage)  # the next fence replaces it
    with pytest.raises(FencedError):
        store.commit(RUN, 120, 1, [store.put(RUN, 120, "model.pt", b"zombie")], fenced=True)


def test_the_uploader_is_fenced_by_a_signed_fence_whatever_another_store_holds(tmp_path: Any, memory_url: str) -> None:
    """A zombie of attempt 1: its first store's fence is torn (ignored, so it commits there,
    where the lineage never restores it); the signed fence in the other store fences it."""
    torn = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    fenced = CheckpointStore(memory_url, region="b", key=TEST_KEY)
    torn.write_fence(RUN, Lineage().then(1, 0))
    _tear(torn, b'{"links": [[1, 0], [2,')
    fenced.write_fence(RUN, Lineage().then(1, 0).then(2, 40))
    ckpt = AsyncCheckpointer([fenced, torn], RUN, generation=1, keep_last=2, outage_s=0.3, on_event=lambda t, f: None)
    ckpt.submit(60, {"model.pt": b"zombie weights"}, {})
    with pytest.raises(CheckpointUploadError) as err:
        ckpt.wait(timeout_s=20)
    assert isinstance(err.value.__cause__, FencedError)
    assert fenced.committed_steps(RUN) == []


# --- generations only go up ------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def _never(what: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{what} must not be reached")

    return call


def test_action_run_of_an_unfinished_run_id_is_refused_and_its_fences_stay(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import orchestrator.config.preflight
    import orchestrator.control.wiring
    from orchestrator.__main__ import main
    from orchestrator.runstate.journal import Journal

    Journal(str(home / "runs" / RUN / "journal.jsonl")).append("run_started", run_id=RUN)
    store = CheckpointStore(f"file://{home}/stores/local-a", region="local-a", key=TEST_KEY)
    store.write_fence(RUN, Lineage().then(1, 0).then(2, 40))
    fence_before = store.fs.cat_file(fence_path(store, RUN))
    journal_before = (home / "runs" / RUN / "journal.jsonl").read_bytes()
    monkeypatch.setattr(orchestrator.control.wiring, "build_controller", _never("build_controller"))
    monkeypatch.setattr(orchestrator.config.preflight, "preflight", _never("preflight"))

    assert main([f"run_id={RUN}", "progress=false"]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in out + err, err
    assert lines[0].startswith("error: run_id:") and RUN in lines[0]
    assert f"action=resume run_id={RUN}" in lines[0]
    assert store.fs.cat_file(fence_path(store, RUN)) == fence_before
    assert (home / "runs" / RUN / "journal.jsonl").read_bytes() == journal_before


def test_a_run_id_that_was_never_started_is_not_refused(home: Path) -> None:
    from orchestrator.commands.run import refuse_unfinished as _refuse_unfinished
    from orchestrator.config.compose import compose
    from orchestrator.runstate.journal import DamagedFile

    (home / "runs" / RUN).mkdir(parents=True)  # a folder, no journal: no run began
    _refuse_unfinished(compose([f"run_id={RUN}"]))
    _refuse_unfinished(compose([]))
    # An empty journal is a damaged run (a run journals its start first), not a new one.
    (home / "runs" / RUN / "journal.jsonl").write_bytes(b"")
    with pytest.raises(DamagedFile, match="is empty"):
        _refuse_unfinished(compose([f"run_id={RUN}"]))


def _controller(home: Path) -> Any:
    from orchestrator.config.compose import compose
    from orchestrator.control.wiring import build_controller

    # A provider the controller never calls here: only its name and what it declares.
    nothing = SimpleNamespace(name="none", capabilities=frozenset())
    return build_controller(compose([f"run_id={RUN}", "progress=false"]), provider=nothing, run_id=RUN)  # type: ignore[arg-type]


def test_a_new_attempt_exceeds_the_highest_fence_in_any_store(home: Path) -> None:
    """A store holding generation 7 from an earlier life of this run_id: the next attempt is 8."""
    from orchestrator.runstate.journal import read_events

    ctl = _controller(home)
    ctl.stores["local-b"].write_fence(RUN, Lineage().then(5, 0).then(7, 300))
    ctl.stores["local-a"].write_fence(RUN, Lineage().then(3, 0))
    ctl._start_above_fences()
    assert ctl.events.next_generation() == 8
    (ev,) = [e for e in read_events(ctl.journal.path) if e["type"] == "fences_read"]
    assert (ev["generation_floor"], ev["highest_fence"], ev["failed"]) == (7, 7, {})


def test_a_resumed_controller_goes_above_a_fence_its_journal_never_saw(home: Path) -> None:
    """The stores hold generation 3, the journal knows only 2 (a fence it never journaled)."""
    from orchestrator.runstate.journal import read_events, read_typed
    from orchestrator.runstate.replay import replay
    from orchestrator.runstate.state import fold

    ctl = _controller(home)
    ctl.journal.append("attempt_started", generation=2, region="local-a")
    for store in ctl.stores.values():
        store.write_fence(RUN, Lineage().then(1, 0).then(3, 20))
    ctl.events.restore(fold(read_typed(ctl.journal.path)))  # as a resumed controller takes its journal
    assert ctl.generation == 2
    ctl._start_above_fences()
    assert ctl.events.next_generation() == 4
    # The floor is in the journal: a later resume keeps it when the stores cannot be read.
    for store in ctl.stores.values():
        store.fs.rm(fence_path(store, RUN))
    assert replay(read_events(ctl.journal.path)).generation == 3


def test_a_store_whose_fence_cannot_be_read_is_journaled_and_the_others_still_count(home: Path) -> None:
    from orchestrator.runstate.journal import read_events

    ctl = _controller(home)
    a, b = ctl.stores["local-a"], ctl.stores["local-b"]
    b.write_fence(RUN, Lineage().then(4, 0))
    a.fs.cat_file = _timeout  # type: ignore[method-assign]
    ctl._start_above_fences()
    assert ctl.events.next_generation() == 5
    (ev,) = [e for e in read_events(ctl.journal.path) if e["type"] == "fences_read"]
    assert list(ev["failed"]) == ["local-a"] and FENCE_NAME in ev["failed"]["local-a"]


def test_a_fence_no_controller_of_this_run_signed_is_journaled_and_raises_nothing(home: Path) -> None:
    """A planted fence of generation 9 in every store: ignored, so the run's next generation
    is its own (a forged high fence must not make the run fence its own commits)."""
    from orchestrator.runstate.journal import read_events

    ctl = _controller(home)
    forged = controller_keys(b"f" * 32, RUN)
    for region, store in ctl.stores.items():
        CheckpointStore(store.url, region=region, key=forged).write_fence(RUN, Lineage().then(9, 0))
    write_bytes(ctl.stores["local-a"].fs, fence_path(ctl.stores["local-a"], RUN), b"[" * 100_000)
    ctl._start_above_fences()
    assert ctl.events.next_generation() == 1
    ignored = {e["region"]: e["reason"] for e in read_events(ctl.journal.path) if e["type"] == "fence_ignored"}
    assert set(ignored) == set(ctl.stores) and "malformed" in ignored["local-a"]
    assert all("does not verify" in r for region, r in ignored.items() if region != "local-a")


# --- retention never empties the lineage ---------------------------------------------------------


def _zombie_store(store: CheckpointStore, write_checkpoint: WriteCheckpoint) -> Lineage:
    """Attempt 1 committed 20 and 40; attempt 2 restarted from 40 and committed 50; the
    zombie of attempt 1 went on to 60..140 in this store; attempt 2's upload of 70 is in flight."""
    for step in (20, 40):
        write_checkpoint(store, RUN, step, attempt=1)
    write_checkpoint(store, RUN, 50, attempt=2)
    for step in (60, 80, 100, 120, 140):
        write_checkpoint(store, RUN, step, attempt=1)
    store.put(RUN, 70, "model.pt", b"half an upload")
    return Lineage().then(1, 0).then(2, 40)


def test_retention_deletes_the_fenced_first_and_keeps_the_newest_on_the_lineage(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint
) -> None:
    lineage = _zombie_store(store, write_checkpoint)
    assert store.retain(RUN, keep=2, lineage=lineage) == [20, 60, 80, 100, 120, 140]
    assert store.all_steps(RUN) == {40: True, 50: True, 70: False}
    best = store.latest_verified(RUN, lineage=lineage)
    assert best is not None and (best.step, best.attempt) == (50, 2)


def test_retention_with_only_zombies_above_keeps_every_lineage_checkpoint_up_to_keep(
    store: CheckpointStore, write_checkpoint: WriteCheckpoint
) -> None:
    """keep_last=3 and only 40 and 20 on the lineage: both stay, however many zombies came after."""
    for step in (20, 40):
        write_checkpoint(store, RUN, step, attempt=1)
    for step in (60, 80, 100, 120):
        write_checkpoint(store, RUN, step, attempt=1)
    lineage = Lineage().then(1, 0).then(2, 40)
    assert store.retain(RUN, keep=3, lineage=lineage) == [60, 80, 100, 120]
    assert store.committed_steps(RUN) == [20, 40]


def test_retention_plan_is_pure_and_orders_the_fenced_first() -> None:
    from recovery.store import retention_plan

    steps = {20: True, 40: True, 50: True, 60: True, 70: False, 80: True, 30: False}
    assert retention_plan(steps, keep=2, fenced={60, 80}) == [60, 80, 20, 30]
    assert retention_plan(steps, keep=2) == [20, 40, 50, 30, 70]  # no lineage: the newest by step, as before
    assert retention_plan({60: True, 70: False}, keep=2, fenced={60}) == [60]  # nothing kept: no folder is "torn"


def test_the_replicator_keeps_the_lineage_in_its_target(
    tmp_path: Path, memory_url: str, write_checkpoint: WriteCheckpoint
) -> None:
    from recovery.replication import Replicator

    primary = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    target = CheckpointStore(memory_url, region="b", key=TEST_KEY)
    lineage = _zombie_store(target, write_checkpoint)
    write_checkpoint(primary, RUN, 90, attempt=2)
    rep = Replicator(RUN, keep_last=2, on_replicated=lambda r: None, on_error=pytest.fail, lineage=lambda: lineage)
    rep.follow(primary, [target])
    assert [r.step for r in rep.tick()] == [90]
    # The zombie's are gone; 50 and attempt 2's 90 stay (and 70, older than 90, is a torn write now).
    assert target.all_steps(RUN) == {50: True, 90: True}


def test_a_zombie_never_prunes_a_later_attempts_checkpoints_in_a_store_left_unfenced(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    """Attempt 2 took over from step 40 but could not fence this store; attempt 1 (a
    zombie, knowing no lineage past itself) commits 100 and 120 there and retains."""
    store = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    for step in (20, 40):
        write_checkpoint(store, RUN, step, attempt=1)
    for step in (60, 80):
        write_checkpoint(store, RUN, step, attempt=2)
    for step in (100, 120):
        write_checkpoint(store, RUN, step, attempt=1)
    deleted = store.retain(RUN, keep=2, lineage=Lineage().then(1, 0), attempt=1)
    assert deleted == [20, 40]  # its own, beyond its keep; attempt 2's untouched
    assert store.committed_steps(RUN) == [60, 80, 100, 120]
    # Attempt 2's own retention, with the lineage, then drops the zombie's.
    lineage = Lineage().then(1, 0).then(2, 40)
    assert store.retain(RUN, keep=2, lineage=lineage, attempt=2) == [100, 120]
    assert store.committed_steps(RUN) == [60, 80]


def test_a_zombies_copy_of_the_same_step_does_not_pass_for_the_lineages(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    """Generation 1 went on past step 40 after generation 2 took over from 40 and wrote its
    own 60: the zombie's step 60 in the target (the run's key, attempt 1) is not the
    lineage's, so the replicator copies generation 2's over it."""
    from recovery.replication import Replicator

    primary = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    target = CheckpointStore(f"file://{tmp_path}/b", region="b", key=TEST_KEY)
    lineage = Lineage().then(1, 0).then(2, 40)
    write_checkpoint(target, RUN, 60, attempt=1)
    write_checkpoint(primary, RUN, 60, attempt=2)
    rep = Replicator(RUN, keep_last=2, on_replicated=lambda r: None, on_error=pytest.fail, lineage=lambda: lineage)
    rep.follow(primary, [target])
    assert [r.step for r in rep.tick()] == [60]
    copy = target.manifest(RUN, 60)
    assert copy is not None and copy.attempt == 2 and target.verify(RUN, 60).ok
    assert rep.tick() == []  # now it holds the lineage's: nothing more to do


# --- restore selection passes over a store that raises ----------------------------------------


def _timeout(*args: Any, **kwargs: Any) -> Any:
    raise TimeoutError("read timed out after 10 s")


def _broken_stores(tmp_path: Path, memory_url: str, write_checkpoint: WriteCheckpoint) -> list[CheckpointStore]:
    """a: a folder where step 60's MANIFEST.json should be; b: a client that times out;
    c: a good checkpoint at step 40."""
    a = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    write_checkpoint(a, RUN, 20)
    (tmp_path / "a" / RUN / "checkpoints" / "step-60" / "MANIFEST.json").mkdir(parents=True)
    b = CheckpointStore(memory_url, region="b", key=TEST_KEY)
    write_checkpoint(b, RUN, 80)
    b.fs.cat_file = _timeout  # type: ignore[method-assign]
    c = CheckpointStore(f"file://{tmp_path}/c", region="c", key=TEST_KEY)
    write_checkpoint(c, RUN, 40)
    return [a, b, c]


def test_restore_selection_skips_a_store_that_raises_and_says_why(
    tmp_path: Path, memory_url: str, write_checkpoint: WriteCheckpoint
) -> None:
    from recovery.replication import sync_newest

    stores = _broken_stores(tmp_path, memory_url, write_checkpoint)
    failed: list[tuple[str, str]] = []
    skipped: list[tuple[object, ...]] = []
    best = sync_newest(
        RUN, stores, lambda *a: skipped.append(a), on_store_error=lambda s, e: failed.append((s.region, e))
    )
    assert best is not None and (best[0].region, best[1].step) == ("c", 40)
    # b's client times out: the store is passed over. a's folder in place of a manifest is
    # that step's fault, not the store's: step 60 is skipped with its reason.
    assert [r for r, _ in failed] == ["b"]
    assert "TimeoutError" in failed[0][1] and "region b" in failed[0][1]
    assert any(60 in a and "a folder, not a regular file" in str(a) for a in skipped), skipped
    assert all("\n" not in e for _, e in failed)


def test_the_controller_journals_a_store_it_passed_over_and_restores_from_another(
    home: Path, memory_url: str, write_checkpoint: WriteCheckpoint
) -> None:
    from orchestrator.control.attempt import AttemptRunner
    from orchestrator.runstate.journal import read_events

    ctl = _controller(home)
    a, b = ctl.stores["local-a"], ctl.stores["local-b"]
    write_checkpoint(b, RUN, 40)
    write_checkpoint(a, RUN, 20)
    a.fs.ls = _timeout  # type: ignore[method-assign]
    runner = AttemptRunner(ctl.ctx)
    try:
        assert runner._prepare_restore("local-b", ctl.ctx.lineage()).step == 40
    finally:
        runner.injector.close()
    skipped = [e for e in read_events(ctl.journal.path) if e["type"] == "restore_store_skipped"]
    assert [(e["by"], e["region"]) for e in skipped] == [("controller", "local-a")]
    assert "TimeoutError" in skipped[0]["error"]


def test_a_copy_into_the_regions_store_that_fails_still_hands_over_at_the_newest_checkpoint(
    home: Path, write_checkpoint: WriteCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.control.attempt as attempt
    from orchestrator.control.attempt import AttemptRunner
    from orchestrator.runstate.journal import read_events
    from recovery.replication import ReplicationError

    ctl = _controller(home)
    write_checkpoint(ctl.stores["local-a"], RUN, 40)

    def refused(*_a: object, **_k: object) -> None:
        raise ReplicationError("local-b: store refused the copy")

    monkeypatch.setattr(attempt, "replicate", refused)
    runner = AttemptRunner(ctl.ctx)
    try:
        assert runner._prepare_restore("local-b", ctl.ctx.lineage()).step == 40
    finally:
        runner.injector.close()
    (failed,) = [e for e in read_events(ctl.journal.path) if e["type"] == "restore_copy_failed"]
    assert failed["step"] == 40 and "refused the copy" in failed["error"]


# --- the runtime restores what the controller's lineage allows ----------------------------------


def _worker(tmp_path: Path, generation: int, **fields: Any) -> Any:
    from orchestrator.runtime.loop.worker import WorkerAttempt
    from orchestrator.wire.control import ControlChannel
    from tests.support.runs import loop_spec

    spec = loop_spec(tmp_path, RUN, generation, {"name": "t", "workload": "digits"}, **fields)
    worker = WorkerAttempt(spec, rank=0, world=1, control=ControlChannel(spec.control_url))
    worker._preempt.set()  # no preemption watch past the test
    return worker


def _events(worker: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in worker.control.read_events(worker.gen, set()) if e["type"] == kind]


def _zombie_after_handover(tmp_path: Path, write_checkpoint: WriteCheckpoint) -> CheckpointStore:
    """Attempt 1 committed 20 and 40; attempt 2 took over from 40; attempt 1's zombie
    committed 60 in a store the fence never reached (it holds no fence at all)."""
    store = CheckpointStore(f"file://{tmp_path}/store", region="r", key=TEST_KEY)
    for step in (20, 40, 60):
        write_checkpoint(store, RUN, step, attempt=1)
    return store


def test_the_runtime_restores_what_the_controllers_lineage_allows_not_what_a_missing_fence_does(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    _zombie_after_handover(tmp_path, write_checkpoint)
    worker = _worker(tmp_path, 2, lineage=[[1, 0], [2, 40]])
    chosen = worker.agree_on_restore()
    assert chosen is not None and chosen[1].step == 40
    (skip,) = _events(worker, "checkpoint_skipped")
    assert skip["step"] == 60 and skip["reason"].startswith("fenced")


def test_without_a_lineage_in_the_spec_the_fence_alone_decides_as_before(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    _zombie_after_handover(tmp_path, write_checkpoint)
    chosen = _worker(tmp_path, 2).agree_on_restore()
    assert chosen is not None and chosen[1].step == 60  # no fence anywhere: nothing tells 60 apart


def test_the_stores_fence_can_refuse_what_a_stale_lineage_would_allow(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    store = _zombie_after_handover(tmp_path, write_checkpoint)
    store.write_fence(RUN, Lineage().then(1, 0).then(2, 40))
    worker = _worker(tmp_path, 2, lineage=[[1, 0]])  # written before the handover
    chosen = worker.agree_on_restore()
    assert chosen is not None and chosen[1].step == 40
    assert "stores' fence" in _events(worker, "checkpoint_skipped")[0]["reason"]


def test_a_fence_can_never_allow_more_than_the_lineage(tmp_path: Path, write_checkpoint: WriteCheckpoint) -> None:
    store = _zombie_after_handover(tmp_path, write_checkpoint)
    store.write_fence(RUN, Lineage().then(1, 0))  # a stale fence: it would let 60 through
    chosen = _worker(tmp_path, 2, lineage=[[1, 0], [2, 40]]).agree_on_restore()
    assert chosen is not None and chosen[1].step == 40


def test_a_standby_restores_by_the_lineage_its_activation_carries(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    _zombie_after_handover(tmp_path, write_checkpoint)
    worker = _worker(tmp_path, 2, lineage=[[1, 0]], standby=True)
    worker.control.activate(2, lineage=[[1, 0], [2, 40]])
    worker.wait_until_active()
    chosen = worker.agree_on_restore()
    assert chosen is not None and chosen[1].step == 40


def test_the_runtime_ignores_a_torn_fence_says_why_and_restores_by_the_lineage(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    primary = CheckpointStore(f"file://{tmp_path}/store", region="r", key=TEST_KEY)
    write_checkpoint(primary, RUN, 60, attempt=1)
    _tear(primary, b'{"links": [[1, 0], [2')
    other = CheckpointStore(f"file://{tmp_path}/other", region="o", key=TEST_KEY)
    write_checkpoint(other, RUN, 40, attempt=1)
    worker = _worker(tmp_path, 2, lineage=[[1, 0], [2, 40]], fallback_stores=[{"region": "o", "url": other.url}])
    chosen = worker.agree_on_restore()
    assert chosen is not None and (chosen[0].region, chosen[1].step) == ("o", 40)
    (ignored,) = _events(worker, "fence_ignored")
    assert ignored["region"] == "r" and "malformed fence" in ignored["reason"]
    assert _events(worker, "restore_store_skipped") == []


@pytest.mark.parametrize(
    ("lineage", "words"),
    [
        ("not a list", "expected a list"),
        ([[1]], "two integers"),
        ([[1, 0], [1, 20]], "generations must increase"),
        ([[1, 0], [3, 20]], "past this attempt's 2"),
        ([[0, 0]], "generation >= 1"),
    ],
)
def test_a_spec_whose_lineage_is_not_one_is_refused_when_loaded(tmp_path: Path, lineage: Any, words: str) -> None:
    import json

    from orchestrator.wire.spec import RuntimeSpec
    from tests.support.runs import loop_spec

    good = loop_spec(tmp_path, RUN, 2, {"name": "t"}, lineage=[[1, 0], [2, 40]])
    good.dump(str(tmp_path / "spec.json"))
    assert RuntimeSpec.load(str(tmp_path / "spec.json")).fencing_lineage() == Lineage().then(1, 0).then(2, 40)
    raw = json.loads((tmp_path / "spec.json").read_text())
    (tmp_path / "spec.json").write_text(json.dumps({**raw, "lineage": lineage}))
    with pytest.raises(ValueError, match=words) as err:
        RuntimeSpec.load(str(tmp_path / "spec.json"))
    assert str(err.value).startswith("runtime spec: lineage:")
