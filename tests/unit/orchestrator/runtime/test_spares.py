"""The spare workers' switch and their preload (the hand-over itself runs on real Ray:
tests/chaos/test_survivors.py)."""

from __future__ import annotations

import sys

import pytest

from orchestrator.runtime import spares

pytestmark = pytest.mark.unit


def test_spares_are_off_until_the_driver_enables_them() -> None:
    saved = list(spares._workload)
    try:
        spares._workload.clear()
        assert not spares.enabled()
        spares.enable("digits", lambda since: True)
        assert spares.enabled()
    finally:
        spares._workload[:] = saved


def test_a_preload_imports_the_loop_and_the_workload_and_never_raises() -> None:
    spares.preload("digits")
    assert "orchestrator.runtime.train_loop" in sys.modules
    spares.preload("no_such_module:Nothing")  # the worker reports it when it builds the workload
