"""The table of fault handlers: every kind the wire names has exactly one."""

from __future__ import annotations

import pytest

from orchestrator.chaos import handlers
from orchestrator.chaos.firing import Handler
from orchestrator.chaos.handlers import FAMILIES, HANDLERS, gather, handler_for
from orchestrator.wire.faults import CONTROLLER_FAULTS, FAULT_KINDS, STORAGE_FAULTS, FaultKind

pytestmark = pytest.mark.unit


def nothing(state: object, firing: object) -> None:
    pass


def test_every_kind_of_the_wire_has_exactly_one_handler() -> None:
    assert sorted(HANDLERS) == sorted(str(k) for k in FAULT_KINDS)
    owners = [kind for family in FAMILIES.values() for kind in family]
    assert len(owners) == len(set(owners)) == len(FAULT_KINDS)


def test_an_unknown_kind_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="unknown fault kind 'meteor'"):
        handler_for("meteor")
    assert handler_for(FaultKind.kill_worker) is HANDLERS["kill_worker"]


def test_a_missing_a_doubled_or_a_foreign_handler_fails_the_table() -> None:
    one = Handler(nothing)
    with pytest.raises(ValueError, match="without a handler: kill_head"):
        gather({"a": {FaultKind.kill_region: one}}, ["kill_region", "kill_head"])
    with pytest.raises(ValueError, match=r"'kill_region' has two handlers: in chaos\.a and chaos\.b"):
        gather({"a": {FaultKind.kill_region: one}, "b": {FaultKind.kill_region: one}}, ["kill_region"])
    with pytest.raises(ValueError, match="the wire does not name: kill_head"):
        gather({"a": {FaultKind.kill_region: one, FaultKind.kill_head: one}}, ["kill_region"])


def test_what_strikes_before_its_mark_and_what_needs_no_cluster() -> None:
    assert sorted(k for k, h in HANDLERS.items() if h.before_mark) == ["corrupt_checkpoint", "kill_worker"]
    no_cluster = {k for k, h in HANDLERS.items() if not h.needs_cluster}
    assert no_cluster == {*CONTROLLER_FAULTS, "corrupt_checkpoint", *(str(k) for k in STORAGE_FAULTS)}
    assert handlers.storage.HANDLERS.keys() >= set(STORAGE_FAULTS)
