"""What a search reads of the spec: its hpo section (one line when missing), ASHA's rungs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator.hpo import asha_rungs
from orchestrator.runtime.search.section import rung_list, search_of

pytestmark = pytest.mark.unit


def test_a_spec_without_hpo_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="hpo: missing"):
        search_of(SimpleNamespace(hpo=None))  # type: ignore[arg-type]
    hpo = SimpleNamespace(scheduler="fifo")
    assert search_of(SimpleNamespace(hpo=hpo)) is hpo  # type: ignore[arg-type]


def test_rungs_for_asha_only() -> None:
    fields = {"max_t": 9, "grace_period": 1, "reduction_factor": 3}
    assert rung_list(SimpleNamespace(scheduler="asha", **fields)) == asha_rungs(9, 1, 3)  # type: ignore[arg-type]
    assert rung_list(SimpleNamespace(scheduler="fifo", **fields)) is None  # type: ignore[arg-type]
