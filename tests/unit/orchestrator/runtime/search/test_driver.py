"""When the driver snapshots the search."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_a_snapshot_is_due_when_something_changed_and_the_last_is_old_enough() -> None:
    # Imported here: the driver imports Ray Tune (seconds), which only this test needs.
    from orchestrator.runtime.search.driver import snapshot_due

    assert snapshot_due(True, 30.0, 30.0)
    assert not snapshot_due(True, 29.9, 30.0)
    assert not snapshot_due(False, 999.0, 30.0)
