"""event_json: a journal line to its event and back, as journals have always read."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from orchestrator.runstate.event_json import EventError, from_json, payload, to_json
from orchestrator.runstate.events import AttemptStarted, Fence, RuntimeReport, Transition, Unknown
from orchestrator.runstate.lifecycle import RunState
from recovery.boundedjson import decode

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "line",
    [
        {"ts": 1, "type": "attempt_started", "generation": 1, "region": "a"},
        {"ts": 1.5, "type": "transition", "to": "RUNNING", "from": "PROVISIONING"},
        {"ts": 2.0, "type": "fence", "generation": 2, "restored_step": 5, "stores": ["a", "b"], "failed": {"c": "x"}},
        {"ts": 3.0, "type": "fault_injected", "kind": "kill_region", "index": 0, "seq": 1, "killed": [1, 2]},
    ],
)
def test_a_line_reads_and_writes_back_unchanged(line: dict[str, Any]) -> None:
    event = from_json(line)
    assert to_json(event) == line
    # Key for key and number for number: an integer stays an integer.
    assert json.dumps(to_json(event)) == json.dumps(line)


def test_records_come_typed() -> None:
    event = from_json({"ts": 1.0, "type": "transition", "to": "RUNNING", "from": "PROVISIONING"})
    assert isinstance(event, Transition) and event.to is RunState.RUNNING and event.from_ is RunState.PROVISIONING
    fence = from_json({"ts": 1.0, "type": "fence", "generation": 2, "restored_step": 0, "stores": ["a"]})
    assert isinstance(fence, Fence) and fence.stores == ("a",)
    assert payload(AttemptStarted(generation=1, region="a", standby=None)) == {
        "generation": 1,
        "region": "a",
        "standby": None,
    }


def test_a_runtime_report_keeps_a_diverged_loss_as_it_came() -> None:
    line = decode('{"ts": 1.0, "type": "runtime.losses", "generation": 2, "points": [[1, NaN]]}', strict=False)
    event = from_json(line)
    assert isinstance(event, RuntimeReport) and event.kind == "losses"
    assert math.isnan(event.fields["points"][0][1])
    assert isinstance(from_json({"ts": 1.0, "type": "from_the_future"}), Unknown)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ([], "is list; expected a JSON object"),
        ({"ts": 1.0}, "lacks 'type'"),
        ({"type": "fence"}, "lacks 'ts'"),
        ({"ts": float("nan"), "type": "fence"}, "'ts'"),
        ({"ts": 1.0, "type": "fence", "generation": 1}, "(fence) lacks 'restored_step'"),
        ({"ts": 1.0, "type": "attempt_started", "generation": True, "region": "a"}, "'generation' of type bool"),
        ({"ts": 1.0, "type": "attempt_started", "generation": 2**64, "region": "a"}, "'generation'"),
        (
            {"ts": 1.0, "type": "fence", "generation": 1, "restored_step": 0, "stores": ["a", 1]},
            "'stores' whose item 1",
        ),
        ({"ts": 1.0, "type": "transition", "to": "BOGUS"}, "'to' 'BOGUS'"),
        ({"ts": 1.0, "type": "attempt_started", "generation": 1, "region": "a", "zone": "z"}, "'zone'"),
        ({"ts": 1.0, "type": "runtime.x", "lag_s": "slow"}, "(runtime.x) has 'lag_s' of type str"),
    ],
)
def test_a_line_that_is_no_event_is_named_in_one_line(line: Any, words: str) -> None:
    with pytest.raises(EventError) as err:
        from_json(line)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_an_extra_field_that_clashes_with_a_declared_one_is_refused_at_write() -> None:
    from orchestrator.runstate.events import FaultInjected

    with pytest.raises(EventError, match=r"'kind' both as a field and in its extra"):
        to_json(FaultInjected(kind="k", extra={"kind": "x"}))
