"""DDP's options by world size (the proof that they keep a restore exact runs forked
gloo ranks: tests/integration/orchestrator/runtime/loop/test_ddp.py)."""

from __future__ import annotations

import pytest

from orchestrator.runtime.loop.ddp import ddp_options

pytestmark = pytest.mark.unit


def test_beyond_two_ranks_ddp_keeps_its_first_bucket_layout_and_two_need_nothing() -> None:
    assert ddp_options(1) == {} and ddp_options(2) == {}
    assert ddp_options(3) == ddp_options(4) == ddp_options(64) == {"find_unused_parameters": True}
