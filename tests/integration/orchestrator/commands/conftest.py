"""Fixtures these integration tests share with their unit tests (the same path under tests/unit)."""

from __future__ import annotations

from tests.unit.orchestrator.commands.test_runs_list import home

__all__ = ["home"]
