"""What rank 0 makes of a shared upload: bytes per rank and the ``upload_shared`` event."""

from __future__ import annotations

import pytest

from orchestrator.runtime.checkpoint.share_plan import ShareReport, bytes_by_rank, delivered_by_rank, share_event

pytestmark = pytest.mark.unit
FILES = {"optimizer.pt": b"o" * 600, "model.pt": b"m" * 300, "state.pt": b"s" * 10, "rng-rank0.pt": b"r" * 20}
SHARES = {"model.pt": 1, "state.pt": 2, "rng-rank0.pt": 1}


def test_bytes_by_rank_counts_each_other_ranks_share() -> None:
    assert bytes_by_rank(FILES, SHARES) == {1: 320, 2: 10}
    assert bytes_by_rank(FILES, {}) == {}


def test_delivered_gives_rank_0_its_own_and_what_it_took_over() -> None:
    landed, taken = ["model.pt", "rng-rank0.pt"], ["state.pt"]
    assert delivered_by_rank(FILES, SHARES, landed, taken) == {0: 610, 1: 320}
    assert delivered_by_rank(FILES, SHARES, [], sorted(SHARES)) == {0: 930}


def test_the_event_comes_for_the_first_shared_upload_and_for_a_takeover_only() -> None:
    smooth = ShareReport({1: 320, 0: 600}, [], 0.1, 0.2)
    assert share_event(20, smooth, first=True) == {
        "step": 20,
        "bytes_by_rank": {"0": 600, "1": 320},
        "taken_over": [],
        "own_s": 0.1,
        "waited_s": 0.2,
    }
    assert share_event(40, smooth, first=False) is None
    took = ShareReport({0: 930}, [f"f{i:02d}" for i in range(25)], 0.1, 2.0)
    fields = share_event(60, took, first=False)
    assert fields is not None and fields["taken_over"] == [f"f{i:02d}" for i in range(20)]
