"""corrupt_newest flips the newest checkpoint wherever a store holds it, and only the run's own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.chaos.storage import corrupt_newest, corrupt_target
from recovery.keys import controller_keys
from recovery.manifest import Manifest
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY

RUN = "run-1"
WriteCheckpoint = Callable[..., Manifest]
TWO_NODES = "cloud.regions.local-a.nodes=2"


def test_corrupt_newest_corrupts_the_newest_step_in_each_store_holding_it_and_spares_laggards(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    a, b, c = (
        CheckpointStore(f"file://{tmp_path}/{n}", region=n, key=TEST_KEY) for n in ("local-a", "local-b", "local-c")
    )
    for store, steps in ((a, (20, 40, 60)), (b, (20, 40, 60)), (c, (20, 40))):
        for step in steps:
            write_checkpoint(store, RUN, step)
    lagging_before = {s: c.fs.cat_file(f"{c.step_path(RUN, s)}/model.pt") for s in (20, 40)}

    assert corrupt_newest([a, b, c], RUN) == {"local-a": 60, "local-b": 60}

    for store in (a, b):
        assert not store.verify(RUN, 60).ok
        assert store.verify(RUN, 40).ok
        m = store.latest_verified(RUN)
        assert m is not None
        assert m.step == 40
    assert {s: c.fs.cat_file(f"{c.step_path(RUN, s)}/model.pt") for s in (20, 40)} == lagging_before
    assert c.verify(RUN, 40).ok


def test_corrupt_newest_is_idempotent_and_passes_over_a_planted_newer_step(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    """Fired twice (a controller that died before marking it fired), the checkpoint stays
    corrupt rather than flipped back; a planted step above it (not signed with the run's
    key) is not the run's newest."""
    a = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    for step in (20, 40):
        write_checkpoint(a, RUN, step)
    stranger = CheckpointStore(f"file://{tmp_path}/a", region="a", key=controller_keys(bytes(32), "stranger"))
    write_checkpoint(stranger, RUN, 900)
    assert corrupt_newest([a], RUN) == {"a": 40}
    assert corrupt_newest([a], RUN) == {"a": 40}
    assert not a.verify(RUN, 40).ok and a.verify(RUN, 20).ok
    assert stranger.verify(RUN, 900).ok


def test_corrupt_newest_without_any_checkpoint_does_nothing(tmp_path: Path) -> None:
    stores = [CheckpointStore(f"file://{tmp_path}/{n}", region=n, key=TEST_KEY) for n in ("a", "b")]
    assert corrupt_newest(stores, RUN) == {}


def test_corrupt_checkpoint_flips_the_model_or_one_ranks_shards() -> None:
    assert corrupt_target(["model.pt", "optimizer.pt", "state.pt"]) == "model.pt"
    names = ["shard-r0.pt", "shard-r10.pt", "shard-r2.pt", "shards.json", "state.pt"]
    assert corrupt_target(names) == "shard-r10.pt"
    assert corrupt_target([]) == "model.pt"
    assert corrupt_target(["experiment.tar"]) == "experiment.tar"  # a search snapshot naming no live trial


def test_in_a_search_the_checkpoint_of_a_trial_that_will_resume_is_flipped_and_the_snapshot_left_whole(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    from orchestrator.chaos.storage import search_part
    from recovery.store import part_of

    a, b = (CheckpointStore(f"file://{tmp_path}/{n}", region=n, key=TEST_KEY) for n in ("local-a", "local-b"))
    ref = {"attempt": 1, "digest": "ab" * 32}
    named = {"trial_00000": {**ref, "iteration": 6}, "trial_00001": {**ref, "iteration": 3}}
    trials = [{"trial_id": "trial_00000", "status": "TERMINATED"}, {"trial_id": "trial_00001", "status": "PAUSED"}]
    extra = {"kind": "hpo_experiment", "checkpoints": named, "trials": trials}
    assert search_part(extra) == ("trial_00001", 3)  # the ended trial's is never read back
    for store in (a, b):
        for trial_id, it in (("trial_00000", 6), ("trial_00001", 3)):
            write_checkpoint(store, part_of(RUN, trial_id), it)
        write_checkpoint(store, RUN, 9, extra=extra)
    assert corrupt_newest([a, b], RUN) == {"local-a": 9, "local-b": 9}
    for store in (a, b):
        assert store.verify(RUN, 9).ok and store.verify(part_of(RUN, "trial_00000"), 6).ok
        assert not store.verify(part_of(RUN, "trial_00001"), 3).ok
    assert search_part({"checkpoints": {"trial_00000": named["trial_00000"]}, "trials": trials}) is None
    assert search_part({"world_size": 2}) is None
