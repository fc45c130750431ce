"""Fixtures these integration tests share with their unit tests (the same path under tests/unit)."""

from __future__ import annotations

from tests.unit.orchestrator.runtime.test_notices import aws, gcp
from tests.unit.orchestrator.runtime.test_train_loop_elastic import at_one

__all__ = ["at_one", "aws", "gcp"]
