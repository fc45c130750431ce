"""benchmarks/search_uploads.py's figures, from a journal's search snapshots."""

from __future__ import annotations

import pytest

from benchmarks.search_uploads import figures

pytestmark = pytest.mark.unit


def snap(uploaded: int, held: int, trials: int, final: int = 0) -> dict:
    return {
        "type": "runtime.search_snapshot",
        "generation": 1,
        "bytes_uploaded": uploaded,
        "bytes_final": final,
        "bytes_if_held": held,
        "trials_uploaded": trials,
    }


def test_the_snapshots_are_summed_and_their_ratio_is_resume_points_uploaded_over_held() -> None:
    journal = [snap(300, 500, 2), {"type": "runtime.trial_result"}, snap(200, 500, 2, final=100)]
    assert figures(journal) == {
        "snapshots": 2,
        "trial_checkpoints_uploaded": 4,
        "bytes_uploaded": 500,
        "bytes_final": 100,
        "bytes_if_held": 1000,
        "uploaded_ratio": 0.4,
    }
    assert figures([])["uploaded_ratio"] is None
