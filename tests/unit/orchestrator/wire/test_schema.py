"""The runtime's objects on the control channel (orchestrator/wire/schema.py): parsed, bounded, never believed."""

from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire import schema as wire
from tests.support.paths import REPO
from tests.unit.orchestrator.wire.test_control import EV, HB, T

pytestmark = pytest.mark.unit


BIG = "x" * (wire.MAX_STR + 1)


def deep(n: int) -> Any:
    v: Any = 0
    for _ in range(n):
        v = [v]
    return v


FINAL = {"time": T, "generation": 2, "final_step": 10, "metrics": {}}


REQ = {"time": T, "seq": 1, "generation": 2, "step": 20, "kind": "kill_worker", "rank": 0, "pid": 123}


MALFORMED: list[tuple[str, Any, Any]] = [
    ("heartbeat", wire.parse_heartbeat, [HB]),
    ("heartbeat", wire.parse_heartbeat, "a string"),
    ("heartbeat", wire.parse_heartbeat, None),
    ("heartbeat", wire.parse_heartbeat, {**HB, "time": "now"}),
    ("heartbeat", wire.parse_heartbeat, {**HB, "time": float("nan")}),
    ("heartbeat", wire.parse_heartbeat, {**HB, "time": float("inf")}),
    ("heartbeat", wire.parse_heartbeat, {**HB, "time": -1.0}),
    ("heartbeat", wire.parse_heartbeat, {k: v for k, v in HB.items() if k != "time"}),
    ("heartbeat", wire.parse_heartbeat, {**HB, "generation": True}),
    ("heartbeat", wire.parse_heartbeat, {**HB, "generation": 0}),
    ("heartbeat", wire.parse_heartbeat, {**HB, "step": -3}),
    ("heartbeat", wire.parse_heartbeat, {**HB, "step": 2.5}),
    ("heartbeat", wire.parse_heartbeat, {**HB, "pid": 0}),
    ("heartbeat", wire.parse_heartbeat, {**HB, "pid": 1 << 40}),
    ("progress", wire.parse_progress, {"time": T, "generation": 2, "step": "5"}),
    ("progress", wire.parse_progress, {"time": T, "generation": 2, "step": 5, "loss": "low"}),
    ("progress", wire.parse_progress, {"time": T, "generation": 2, "step": 5, "total": -1}),
    ("progress", wire.parse_progress, {"time": T, "generation": 2, "step": 5, "last_checkpoint": BIG}),
    ("progress", wire.parse_progress, {"time": T, "generation": 2, "step": 5, "telemetry": deep(40)}),
    ("event", wire.parse_event, {**EV, "type": "transition"}),
    ("event", wire.parse_event, {**EV, "type": "fence"}),
    ("event", wire.parse_event, {**EV, "type": "teardown"}),
    ("event", wire.parse_event, {**EV, "type": "fences_read"}),
    ("event", wire.parse_event, {**EV, "type": "Train Started"}),
    ("event", wire.parse_event, {**EV, "type": 7}),
    ("event", wire.parse_event, {k: v for k, v in EV.items() if k != "type"}),
    ("event", wire.parse_event, {**EV, "ts": "forged"}),
    ("event", wire.parse_event, {**EV, "by": "controller"}),
    ("event", wire.parse_event, {**EV, "type_": "x"}),
    ("event", wire.parse_event, {**EV, "step": "ten"}),
    ("event", wire.parse_event, {**EV, "restored_step": -1}),
    ("event", wire.parse_event, {**EV, "lag_s": float("nan")}),
    ("event", wire.parse_event, {**EV, "config": [1, 2]}),
    ("event", wire.parse_event, {**EV, "error": BIG}),
    ("event", wire.parse_event, {**EV, "k" * 100: 1}),
    ("event", wire.parse_event, {**EV, "type": "train_started"}),  # lacks restored_step
    ("event", wire.parse_event, {**EV, "type": "user_error", "error": None}),
    ("event", wire.parse_event, {**EV, "type": "user_error", "error": "E: x", "site": "a.py:1\nforged"}),
    ("event", wire.parse_event, {**EV, "type": "user_error", "error": "E: x", "site": "a" * 600}),
    ("event", wire.parse_event, {**EV, "type": "user_error", "error": "E: x", "site": 3}),
    ("event", wire.parse_event, {**EV, "type": "losses", "points": [[1, "x"]]}),
    ("event", wire.parse_event, {**EV, "type": "losses", "points": [[1, 2, 3]]}),
    ("event", wire.parse_event, {**EV, "type": "losses", "points": "1,2"}),
    ("event", wire.parse_event, {**EV, "type": "store_fallback", "from": "a", "to": 3}),
    ("event", wire.parse_event, {**EV, "type": "preempted", "step": None}),
    ("event", wire.parse_event, {**EV, "type": "train_started", "restored_step": 0, "worker_pids": [12, 0]}),
    ("event", wire.parse_event, {**EV, "type": "train_started", "restored_step": 0, "worker_pids": ["12"]}),
    ("event", wire.parse_event, {**EV, "type": "train_started", "restored_step": 0, "worker_pids": 12}),
    ("event", wire.parse_event, {**EV, "worker_pids": [1] * (wire.MAX_WORLD + 1)}),
    ("event", wire.parse_event, {**EV, "type": "train_started", "restored_step": 0, "worker_nodes": [0, -1]}),
    ("event", wire.parse_event, {**EV, "type": "train_started", "restored_step": 0, "worker_nodes": [True]}),
    ("event", wire.parse_event, {**EV, "worker_nodes": [wire.MAX_NODE_INDEX + 1]}),
    ("event", wire.parse_event, {**EV, "worker_nodes": [0] * (wire.MAX_WORLD + 1)}),
    ("final", wire.parse_final, {**FINAL, "final_step": "10"}),
    ("final", wire.parse_final, {k: v for k, v in FINAL.items() if k != "final_step"}),
    ("final", wire.parse_final, {**FINAL, "metrics": "good"}),
    ("final", wire.parse_final, {**FINAL, "weights_sha256": 5}),
    ("exit", wire.parse_exit, {"time": T, "generation": 2, "code": "0"}),
    ("exit", wire.parse_exit, {"time": T, "generation": 2, "code": 1000}),
    ("exit", wire.parse_exit, {"time": T, "generation": 2}),
    ("exit", wire.parse_exit, {"time": T, "generation": 2, "code": False}),
    ("chaos request", wire.parse_chaos_request, {k: v for k, v in REQ.items() if k != "generation"}),
    ("chaos request", wire.parse_chaos_request, {**REQ, "seq": 0}),
    ("chaos request", wire.parse_chaos_request, {**REQ, "pid": -9}),
    ("chaos request", wire.parse_chaos_request, {**REQ, "pid": "123"}),
    ("chaos request", wire.parse_chaos_request, {**REQ, "step": None}),
    ("chaos request", wire.parse_chaos_request, {**REQ, "during": "rm -rf /"}),
    ("chaos fired", wire.parse_chaos_fired, {"time": T, "count": "1", "steps": []}),
    ("chaos fired", wire.parse_chaos_fired, {"time": T, "count": 1, "steps": 5}),
    ("chaos fired", wire.parse_chaos_fired, {"time": T, "count": 1, "steps": ["a"]}),
    ("preempt", wire.parse_preempt, {"time": T, "generation": "2"}),
    ("preempt", wire.parse_preempt, {"time": T, "generation": 2, "pid": 1.5}),
]


@pytest.mark.parametrize(("what", "parse", "obj"), MALFORMED, ids=[f"{m[0]}-{i}" for i, m in enumerate(MALFORMED)])
def test_every_schema_rejects_malformed_objects_in_one_line(what: str, parse: Any, obj: Any) -> None:
    with pytest.raises(wire.WireError) as err:
        parse(obj)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200
    assert BIG not in str(err.value)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"   ",
        b"{not json",
        b"[1, 2]",
        b'"a string"',
        b"42",
        b"null",
        b"\xff\xfe{}",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": "' + b"y" * (wire.MAX_BYTES + 10) + b'"}',
        b'{"n": ' + b"9" * 5000 + b"}",
    ],
    ids=lambda d: repr(d[:12]),
)
def test_decode_takes_only_a_bounded_json_object(data: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.decode(data)


def test_a_diverged_loss_or_metric_is_data_not_an_invalid_object() -> None:
    prog = wire.parse_progress(wire.decode(b'{"time": 1, "generation": 2, "step": 3, "loss": NaN}'))
    assert prog.step == 3
    final = wire.decode(b'{"time": 1, "generation": 2, "final_step": 3, "metrics": {"eval_loss": Infinity}}')
    assert wire.parse_final(final).final_step == 3
    ev = wire.decode(b'{"time": 1, "generation": 2, "type": "losses", "points": [[1, NaN]]}')
    assert wire.parse_event(ev).kind == "losses"
    with pytest.raises(wire.WireError):
        wire.parse_heartbeat(wire.decode(b'{"time": NaN, "generation": 2}'))


def test_train_started_carries_every_ranks_pid_in_rank_order() -> None:
    ev = wire.parse_event({**EV, "type": "train_started", "restored_step": 0, "worker_pids": [401, 402]})
    assert ev.fields["worker_pids"] == [401, 402]


def test_train_started_may_say_which_node_each_rank_runs_on() -> None:
    ev = wire.parse_event({**EV, "type": "train_started", "restored_step": 0, "worker_nodes": [0, 2]})
    assert ev.fields["worker_nodes"] == [0, 2]
    ev = wire.parse_event({**EV, "type": "train_started", "restored_step": 0, "worker_nodes": None})
    assert ev.fields["worker_nodes"] is None


def _emitted_kinds() -> set[str]:
    root = REPO
    kinds: set[str] = set()
    pattern = re.compile(
        r'(?:\.event\(\s*[^,()]+(?:\([^)]*\))?\s*,|on_event\(|_event\()\s*"([a-z_]+)"',
    )
    for path in glob.glob(str(root / "orchestrator/runtime/**/*.py"), recursive=True) + glob.glob(
        str(root / "recovery/*.py")
    ):
        kinds |= set(pattern.findall(Path(path).read_text()))
    return kinds


def test_every_event_kind_the_runtime_emits_is_known() -> None:
    emitted = _emitted_kinds()
    assert {"train_started", "user_error", "store_fallback", "fenced_write"} <= emitted
    assert emitted - wire.EVENT_KINDS == set(), "add new runtime events to wire.EVENT_KINDS"
