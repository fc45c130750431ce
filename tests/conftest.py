"""Markers by folder, so ``pytest -m unit`` runs the fast tier in seconds."""

from __future__ import annotations

import pathlib

import pytest

_TIERS = ("unit", "integration", "chaos")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = pathlib.Path(str(item.fspath)).parts
        for tier in _TIERS:
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))
