"""Each store's newest verified checkpoint, from the journal's events."""

from __future__ import annotations

import pytest

from orchestrator.console.checkpoints import StoreCheckpoint, store_checkpoints
from orchestrator.runstate import events as E
from tests.support.console_runs import rt

pytestmark = pytest.mark.unit


def test_a_commit_and_each_copy_put_a_checkpoint_in_their_store() -> None:
    stores = store_checkpoints(
        [
            rt(100.0, "checkpoint_committed", 1, step=50, region="a"),
            rt(100.4, "replicated", 1, step=50, to="b", lag_s=0.4, **{"from": "a"}),
            rt(110.0, "checkpoint_committed", 1, step=100, region="a"),
        ]
    )
    assert stores["a"] == StoreCheckpoint("a", 100, 110.0, None, 0)
    assert stores["b"] == StoreCheckpoint("b", 50, 100.4, 0.4, 0)
    assert stores["a"].age_s(130.0) == 20.0 and StoreCheckpoint("c").age_s(1.0) is None


def test_a_checkpoint_that_did_not_verify_in_a_store_is_not_counted_there() -> None:
    stores = store_checkpoints(
        [
            rt(100.0, "checkpoint_committed", 1, step=50, region="a"),
            rt(110.0, "checkpoint_committed", 1, step=100, region="a"),
            rt(120.0, "checkpoint_skipped", 2, step=100, region="a", reason="manifest"),
            E.CheckpointSkipped(ts=121.0, region="b", step=7, reason="x", by="controller"),
        ]
    )
    assert (stores["a"].step, stores["a"].skipped) == (50, 1)
    assert stores["b"] == StoreCheckpoint("b", None, None, None, 1)


def test_a_fenced_attempts_word_and_odd_values_are_nobodys() -> None:
    zombie = E.RuntimeReport(ts=5.0, kind="checkpoint_committed", fields={"by": "zombie", "step": 9, "region": "a"})
    odd = [
        rt(1.0, "checkpoint_committed", 1, step=-1, region="a"),
        rt(1.0, "checkpoint_committed", 1, step=True, region="a"),
        rt(1.0, "replicated", 1, step=3, to=["b"]),
        rt(1.0, "checkpoint_committed", 1, step=4, region="r" * 500),
    ]
    stores = store_checkpoints([zombie, *odd, E.Replicated(ts=2.0, step=2, to="c", lag_s=1.5)])
    assert set(stores) == {"r" * 100, "c"} and stores["c"].lag_s == 1.5
