"""Fixtures these integration tests share with their unit tests (the same path under tests/unit)."""

from __future__ import annotations

from tests.unit.orchestrator.runtime.loop.test_train_loop_elastic import at_one

__all__ = ["at_one"]
