"""Fixtures these integration tests share with their unit tests (the same path under tests/unit)."""

from __future__ import annotations

from tests.unit.orchestrator.runtime.test_notices import aws, gcp

__all__ = ["aws", "gcp"]
