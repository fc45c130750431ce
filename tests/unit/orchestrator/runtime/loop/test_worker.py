"""Rank 0's restore choice, run while the worker builds its model, and the node's scratch copy
it reads instead of the store where it holds the checkpoint (orchestrator/runtime/loop/worker.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.runtime.checkpoint.scratch import CURRENT, LocalCopy
from orchestrator.runtime.loop import worker
from orchestrator.runtime.loop.worker import (
    Prefetch,
    WorkerAttempt,
    handed_to_group,
    is_comm_failure,
    release_frames,
    restored_by_rank0,
)
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY, WriteCheckpoint

pytestmark = pytest.mark.unit


def test_prefetch_runs_at_once_and_hands_back_its_value() -> None:
    started, go = threading.Event(), threading.Event()

    def choose() -> tuple[int, str]:
        started.set()
        go.wait(5)
        return 0, "manifest"

    p = Prefetch(choose)
    assert started.wait(5)  # running before anyone asks for it
    go.set()
    assert p.result() == (0, "manifest")


def test_prefetch_raises_what_the_choice_raised_where_it_is_taken() -> None:
    def choose() -> None:
        raise RuntimeError("injected by chaos.faults[0]")

    p = Prefetch(choose)
    with pytest.raises(RuntimeError, match="injected"):
        p.result()


def test_rank0_keeps_the_shared_state_and_its_own_rng_only() -> None:
    assert restored_by_rank0("model.pt") and restored_by_rank0("state.pt") and restored_by_rank0("rng-rank0.pt")
    assert not restored_by_rank0("rng-rank1.pt")


def test_rank0_hands_the_group_all_it_kept_but_its_own_rng() -> None:
    assert handed_to_group("model.pt") and handed_to_group("state.pt") and handed_to_group("shards.json")
    assert not handed_to_group("rng-rank0.pt")


def _timed(began: float, chosen: float | None) -> WorkerAttempt:
    attempt = object.__new__(WorkerAttempt)
    attempt.choice_began, attempt.choice_ended = began, chosen
    return attempt


def test_a_restores_time_is_its_choice_and_its_load_their_overlap_counted_once() -> None:
    # Chosen (0-3) before the model was built (restore called at 5): 3 s choice + 2 s load.
    assert _timed(0.0, 3.0).restore_work_s(5.0, 7.0) == 5.0
    # Still choosing when called at 2 (chosen at 6, loaded by 7): 6 s of choice + 1 s of load.
    assert _timed(0.0, 6.0).restore_work_s(2.0, 7.0) == 7.0
    # No choice made (rank > 0): the load alone.
    assert _timed(4.0, None).restore_work_s(4.0, 5.5) == 1.5
    # A standby chooses inside its restore (4-5), then loads (5-5.5): all of it, once.
    assert _timed(4.0, 5.0).restore_work_s(4.0, 5.5) == 1.5


def gloo_error() -> RuntimeError:
    return RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:4527")


def test_a_collective_broken_by_a_lost_peer_is_a_comm_failure_however_wrapped() -> None:
    assert is_comm_failure(gloo_error())
    # Wrapped, as a user's code or DDP may raise it.
    try:
        try:
            raise gloo_error()
        except RuntimeError as inner:
            raise ValueError("step failed") from inner
    except ValueError as outer:
        assert is_comm_failure(outer)


def test_the_workloads_own_error_is_no_comm_failure() -> None:
    assert not is_comm_failure(ValueError("shapes do not match"))
    assert not is_comm_failure(ZeroDivisionError())


def test_a_released_failure_holds_none_of_its_frames_locals() -> None:
    class Held:
        pass

    def step() -> None:
        held = Held()  # noqa: F841  (what a failed step's frame keeps alive)
        raise gloo_error()

    try:
        step()
    except RuntimeError as exc:
        caught = exc
    frames = []
    tb = caught.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    assert any("held" in f.f_locals for f in frames)
    release_frames(caught)
    assert not any("held" in f.f_locals for f in frames)


class _Source:
    region = "local-a"


def _group_of_two(choices: list[int], others: list[str | None], rank: int = 0) -> tuple[WorkerAttempt, list[str]]:
    """A rank of two whose choices come from ``choices`` (steps; then none) and whose
    peer's read of each fails with ``others``' reason (None: it read it)."""
    from recovery.manifest import Manifest

    attempt = object.__new__(WorkerAttempt)
    attempt.rank, attempt.world = rank, 2
    attempt._bad_choices = set()
    journal: list[str] = []
    steps, peers = iter(choices), iter(others)

    def agree() -> tuple[_Source, Manifest] | None:
        step = next(steps, None)
        if step is None:
            return None
        return _Source(), Manifest(run_id="r", step=step, attempt=1, files=(), committed_at=0.0)

    def every_ranks(mine: str | None) -> list[str | None]:
        theirs = next(peers)
        return [mine, theirs] if rank == 0 else [theirs, mine]

    attempt.agree_on_restore = agree  # type: ignore[method-assign]
    attempt.every_ranks = every_ranks  # type: ignore[method-assign]
    attempt._skipped = lambda store, step, reason: journal.append(f"{store.region} {step}: {reason}")  # type: ignore[method-assign]
    return attempt, journal


def test_a_checkpoint_another_rank_finds_bad_is_passed_over_by_the_whole_group_once() -> None:
    why = "failed verification while restoring (rank 1): region x: shard-r1.pt does not match its manifest"
    attempt, journal = _group_of_two([30, 20], [why, None])
    dropped: list[str] = []
    got = attempt.restore_agreed(lambda source, m: f"read {m.step}", drop=dropped.append)
    assert got is not None and (got[1].step, got[2]) == (20, "read 20")
    # What this rank read of the bad one is dropped; the skip names the rank and the file.
    assert dropped == ["read 30"]
    assert journal == [f"local-a 30: {why}"]
    assert attempt._bad_choices == {("local-a", 30)}


def test_a_rank_whose_own_read_fails_says_so_and_goes_on_with_the_next_choice() -> None:
    from recovery.manifest import ManifestError

    def read(source: _Source, m: object) -> str:
        if m.step == 30:
            raise ManifestError("store x: step-30/shard-r1.pt does not match its manifest\nmore")
        return "ok"

    attempt, journal = _group_of_two([30, 20], [None, None], rank=1)
    said: list[str | None] = []
    every_ranks = attempt.every_ranks
    attempt.every_ranks = lambda mine: said.append(mine) or every_ranks(mine)  # type: ignore[method-assign]
    got = attempt.restore_agreed(read)
    assert got is not None and got[1].step == 20
    assert attempt._bad_choices == {("local-a", 30)}
    # What it tells the others: its rank, the failure's kind and first line.
    assert said == [
        "failed verification while restoring (rank 1): store x: step-30/shard-r1.pt does not match its manifest",
        None,
    ]
    assert journal == []  # rank 0 journals it


def test_a_store_that_cannot_be_read_is_said_as_such_not_as_a_failed_verification() -> None:
    from recovery.store import StoreError

    why = "region local-a: store file:///s: cannot read step-30/shard-r0.pt: timed out"

    def read(source: _Source, m: object) -> str:
        raise StoreError(why)

    attempt, journal = _group_of_two([30], [None])
    assert attempt.restore_agreed(read) is None
    assert journal == [f"local-a 30: could not be read while restoring (rank 0): {why}"]


# --- rank 0's choice, with the node's scratch copy ----------------------------------------------


def _rank0_choosing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_checkpoint: WriteCheckpoint
) -> tuple[WorkerAttempt, Path, Path, list[tuple[str, dict[str, Any]]]]:
    """Rank 0 of a run whose one checkpoint (step 10) is in a file store and in the node's
    scratch copy: the attempt, the store's folder of it, the copy's, and the journal."""
    monkeypatch.setattr(worker, "restore_rule", lambda spec, control, stores: (None, stores))
    store = CheckpointStore(f"file://{tmp_path}/store", region="local-a", key=TEST_KEY)
    files = {"model.pt": b"w" * 1000, "state.pt": b"s" * 10, "rng-rank0.pt": b"r0", "rng-rank1.pt": b"r1"}
    m = write_checkpoint(store, "run", 10, files=files)
    local = LocalCopy(str(tmp_path / "scratch"))
    local.keep(m, {n: b for n, b in files.items() if n != "rng-rank1.pt"})
    journal: list[tuple[str, dict[str, Any]]] = []
    attempt = object.__new__(WorkerAttempt)
    attempt.spec = SimpleNamespace(run_id="run", generation=1)  # type: ignore[assignment]
    attempt.control = SimpleNamespace(event=lambda gen, kind, **f: journal.append((kind, f)))  # type: ignore[assignment]
    attempt.gen, attempt.store, attempt.fallbacks = 1, store, []
    attempt._bad_choices = set()
    attempt.checkpointer = SimpleNamespace(local=local)  # type: ignore[assignment]
    attempt._restore_hook = lambda step: None  # type: ignore[method-assign]
    (folder,) = (tmp_path / "store").rglob("step-10*")
    return attempt, folder, tmp_path / "scratch" / CURRENT, journal


def _skips(attempt: WorkerAttempt) -> tuple[Any, list[str]]:
    skipped: list[str] = []
    chosen = attempt._choose_newest(lambda store, step, reason: skipped.append(f"{step}: {reason}"))
    return chosen, skipped


@pytest.mark.parametrize(
    ("changed", "journaled"),
    [
        # The store's bytes changed at the same size: had the choice read them, it would
        # skip the checkpoint; it reads the node's copy instead.
        ("store", ["restored_from_scratch"]),
        # The copy changed: passed over for the store's bytes, read and verified.
        ("copy", []),
    ],
)
def test_a_copy_on_the_node_is_read_from_there_and_one_that_fails_is_passed_over_for_the_store(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_checkpoint: WriteCheckpoint,
    changed: str,
    journaled: list[str],
) -> None:
    attempt, folder, copy, journal = _rank0_choosing(tmp_path, monkeypatch, write_checkpoint)
    ((folder if changed == "store" else copy) / "model.pt").write_bytes(b"x" * 1000)
    chosen, skipped = _skips(attempt)
    assert chosen is not None and skipped == []
    assert attempt._verified == {"model.pt": b"w" * 1000, "state.pt": b"s" * 10, "rng-rank0.pt": b"r0"}
    assert [kind for kind, _ in journal] == journaled


def test_neither_the_copy_nor_the_store_verifying_skips_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_checkpoint: WriteCheckpoint
) -> None:
    attempt, folder, copy, _ = _rank0_choosing(tmp_path, monkeypatch, write_checkpoint)
    (copy / "model.pt").write_bytes(b"x" * 1000)
    (folder / "model.pt").write_bytes(b"y" * 1000)
    chosen, skipped = _skips(attempt)
    assert chosen is None and len(skipped) == 1
    assert skipped[0].startswith("10: failed verification while restoring") and "model.pt" in skipped[0]


def test_a_file_the_store_lost_is_not_made_up_by_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_checkpoint: WriteCheckpoint
) -> None:
    # The store stays the truth of what was committed: its copy short of a file is no checkpoint.
    attempt, folder, _, _ = _rank0_choosing(tmp_path, monkeypatch, write_checkpoint)
    (folder / "model.pt").unlink()
    chosen, skipped = _skips(attempt)
    assert chosen is None and len(skipped) == 1 and "model.pt" in skipped[0]
