"""Which stores a committed checkpoint is copied to."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator.runtime.checkpoint.replicate import replica_targets

pytestmark = pytest.mark.unit


def test_every_store_but_the_source_less_those_left_alone_until_later() -> None:
    a, b, c = (SimpleNamespace(region=r) for r in "abc")
    stores = [a, b, c]
    assert replica_targets(stores, a, {}, now=100.0) == [b, c]  # type: ignore[arg-type]
    assert replica_targets(stores, a, {"b": 120.0}, now=100.0) == [c]  # type: ignore[arg-type]
    assert replica_targets(stores, a, {"b": 100.0}, now=100.0) == [b, c]  # type: ignore[arg-type]
    assert replica_targets([a], a, {}, now=0.0) == []  # type: ignore[arg-type]
