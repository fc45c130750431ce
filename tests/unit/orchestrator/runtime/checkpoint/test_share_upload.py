"""A rank's share of a checkpoint, put by the rank itself: never past a fence this run's controller signed."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.runtime.checkpoint.share_upload import ShareUpload
from recovery.fencing import Lineage
from recovery.keys import controller_keys
from recovery.store import CheckpointStore
from tests.unit.orchestrator.runtime.checkpoint.test_background import _plan, _share_of, _stores

pytestmark = pytest.mark.unit
RUN = "ckpt-run"
FILES = {"model.pt": b"m" * 300, "optimizer.pt": b"o" * 600, "state.pt": b"s" * 10, "rng-rank0.pt": b"r" * 20}


def test_a_fenced_rank_puts_nothing(tmp_path: Path) -> None:
    rank0, rank1 = _stores(tmp_path)
    rank0.write_fence(RUN, Lineage().then(1, 0).then(2, 10))
    files = dict(FILES)
    shares, digests = _plan(files, 2)
    share = ShareUpload(rank1, RUN, 1)  # attempt 1: a zombie now
    share.submit(20, _share_of(files, shares, 1), digests)
    share.wait(20)
    assert set(share.last.values()) == {"fenced"} and share.fenced
    assert rank0.all_steps(RUN) == {}
    share.submit(40, _share_of(files, shares, 1), digests)  # and stays quiet
    assert share.wait(1) and rank0.all_steps(RUN) == {}


def test_a_fence_this_run_s_controller_did_not_sign_stops_no_share(tmp_path: Path) -> None:
    _, rank1 = _stores(tmp_path)
    forger = CheckpointStore(rank1.url, region=rank1.region, key=controller_keys(b"f" * 32, RUN))
    forger.write_fence(RUN, Lineage().then(1, 0).then(9, 10))  # a generation far above: forged
    files = dict(FILES)
    shares, digests = _plan(files, 2)
    share = ShareUpload(rank1, RUN, 2)
    share.submit(20, _share_of(files, shares, 1), digests)
    share.wait(20)
    assert set(share.last.values()) == {"put"} and not share.fenced
