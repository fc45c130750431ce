"""A worker's output to its rank's file (orchestrator/runtime/loop/rank_log.py); capture itself, which
starts a process, is an integration test."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_no_log_dir_leaves_a_workers_output_where_it_was() -> None:
    from orchestrator.runtime.loop.rank_log import capture

    assert capture(None, 0, 1) is None
