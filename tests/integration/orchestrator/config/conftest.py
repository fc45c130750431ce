"""Fixtures these integration tests share with their unit tests (the same path under tests/unit)."""

from __future__ import annotations

from tests.unit.orchestrator.config.test_usercode import project

__all__ = ["project"]
