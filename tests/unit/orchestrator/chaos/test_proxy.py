"""The storage fault proxy's shapes (orchestrator/chaos/proxy.py). The proxy itself listens on a
socket: tests/chaos/test_storage_faults.py drives it in real runs."""

from __future__ import annotations

import pytest

from orchestrator.chaos.proxy import Mode, Shape

pytestmark = pytest.mark.unit


def test_a_new_shape_passes_everything_through_unslowed() -> None:
    assert Shape() == Shape(Mode.PASS, 0.0, None)


def test_the_modes_are_the_storage_faults_words() -> None:
    assert [str(m) for m in Mode] == ["pass", "refuse", "blackhole", "slow"]
