"""Rank 0's restore choice, run while the worker builds its model (orchestrator/runtime/worker.py)."""

from __future__ import annotations

import threading

import pytest

from orchestrator.runtime.worker import Prefetch, restored_by_rank0

pytestmark = pytest.mark.unit


def test_prefetch_runs_at_once_and_hands_back_its_value() -> None:
    started, go = threading.Event(), threading.Event()

    def choose() -> tuple[int, str]:
        started.set()
        go.wait(5)
        return 0, "manifest"

    p = Prefetch(choose)
    assert started.wait(5)  # running before anyone asks for it
    go.set()
    assert p.result() == (0, "manifest")


def test_prefetch_raises_what_the_choice_raised_where_it_is_taken() -> None:
    def choose() -> None:
        raise RuntimeError("injected by chaos.faults[0]")

    p = Prefetch(choose)
    with pytest.raises(RuntimeError, match="injected"):
        p.result()


def test_rank0_keeps_the_shared_state_and_its_own_rng_only() -> None:
    assert restored_by_rank0("model.pt") and restored_by_rank0("state.pt") and restored_by_rank0("rng-rank0.pt")
    assert not restored_by_rank0("rng-rank1.pt")
