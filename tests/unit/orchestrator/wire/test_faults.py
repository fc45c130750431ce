"""The fault kinds and trigger points both sides agree on (orchestrator/wire/faults.py)."""

from __future__ import annotations

import pytest

from orchestrator.wire.faults import (
    FAULT_KINDS,
    NODE_FAULTS,
    REGION_FAULTS,
    RUNTIME_POINTS,
    SEARCH_FAULTS,
    STORAGE_FAULTS,
    During,
    FaultKind,
)

pytestmark = pytest.mark.unit


def test_each_kind_is_its_own_name_and_every_group_holds_kinds() -> None:
    assert all(str(k) == k.name for k in FaultKind)
    assert FAULT_KINDS == tuple(FaultKind)
    for group in (STORAGE_FAULTS, REGION_FAULTS, NODE_FAULTS, SEARCH_FAULTS):
        assert group and set(group) <= set(FAULT_KINDS)
    assert not set(NODE_FAULTS) & set(STORAGE_FAULTS)


def test_the_runtime_meets_only_the_points_it_passes_through() -> None:
    assert set(RUNTIME_POINTS) == {During.checkpoint_upload, During.restore}
    assert set(RUNTIME_POINTS) < set(During)
