"""What may travel on the control channel: one schema per object the runtime writes.

The runtime runs on machines the controller does not trust with its own state (a
zombie, a user's code, anyone who can write to the control store), so every object
read from the channel goes through ``parse_*`` here before anything believes it:
types, ranges (finite numbers, non-negative counts), bounded strings and sizes, and
the closed set of event kinds. Anything else raises ``WireError`` with a one-line
reason that never quotes the object (it could be huge, or hold a secret).

Pure and dependency-free: the runtime and the controller both import it, and it
imports nothing of the controller's (config, journal).
"""

from __future__ import annotations

import functools
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from orchestrator.wire.codec import (
    decode_object,
    read_bool,
    read_dict,
    read_float,
    read_int,
    read_list,
    read_str,
    require,
)
from recovery.boundedjson import CodecError

# A final.json with a search's trials and every rank's telemetry stays well below this.
MAX_BYTES = 1 << 20
MAX_SITE = 512  # a user error's file:line (the runtime cuts it to 400)
MAX_STR = 16_384  # a user error's traceback is cut to 8000 characters by the runtime
MAX_DEPTH = 12
MAX_NODES = 50_000
MAX_KEY = 64
MAX_POINTS = 10_000  # a "losses" event's points: one flush of the loss series
MAX_PID = 1 << 31
MAX_INT = (1 << 63) - 1
MAX_WORLD = 65_536  # ranks of one attempt: a "worker_pids" list
MAX_NODE_INDEX = 65_536  # a node's index in its cluster (0: the head)
# The Ray node label a provider gives each node of a cluster it starts: the node's index
# (0 the head, worker nodes 1..), as the provider's ``nodes`` tells them. Ranks read it to
# say where they run (``worker_nodes``), so the controller knows whether a lost node
# held a worker of the group. A provider that sets none leaves that unknown.
NODE_LABEL = "orchestrator/node"

# Every kind of event the runtime emits (tests/unit/test_wire.py checks this against its
# sources). Closed: an event of another kind is not the runtime's, and is dropped.
EVENT_KINDS = frozenset(
    {
        "group_left",
        "peer_restore",
        "regroup_refused",
        "survivors_off",
        "checkpoint_committed",
        "checkpoint_merge_conflict",
        "checkpoint_skipped",
        "driver_connected",
        "driver_started",
        "world_waiting",
        "fenced",
        "fenced_write",
        "fence_ignored",
        "losses",
        "lost_nodes_found",
        "multipart_aborted",
        "pbt_exploit",
        "placement_reused",
        "preempted",
        "preemption_notice",
        "preemption_notice_invalid",
        "replicated",
        "replication_failed",
        "restore_store_skipped",
        "restore_shards",
        "restored_from_scratch",
        "retention_failed",
        "runtime_error",
        "scratch_full",
        "scratch_recovered",
        "search_snapshot",
        "spare_taken",
        "store_fallback",
        "train_started",
        "trial_checkpointed",
        "trial_restored",
        "trial_result",
        "trial_started",
        "upload_recovered",
        "upload_retry",
        "upload_shared",
        "upload_superseded",
        "user_error",
        "workers_ready",
        "workers_started",
    }
)
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
P = ParamSpec("P")
R = TypeVar("R")


class WireError(CodecError):
    """An object that is not what the runtime writes; the message is one line."""


def _schema(parse: Callable[P, R]) -> Callable[P, R]:
    """``parse``, raising WireError for whatever the codec refuses on its way."""

    @functools.wraps(parse)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return parse(*args, **kwargs)
        except WireError:
            raise
        except CodecError as exc:
            raise WireError(str(exc), exc.name, exc.expected) from None

    return checked


# --- checks: each returns the value when it passes ------------------------------------------
def _kind(value: Any, name: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise WireError(f"has {name!r} that is no name (lowercase letters, digits and _, at most 64)")
    return value


def _count(value: Any, name: str, low: int = 0, high: int = MAX_INT) -> int:
    return read_int(value, name, low, high)


def _number(value: Any, name: str, low: float = -math.inf) -> float:
    return read_float(value, name, low)


def _any_number(value: Any, name: str) -> float:
    # A loss may be NaN or infinite: that is what diverging training reports.
    return read_float(value, name, finite=False)


def _str(value: Any, name: str) -> str:
    return read_str(value, name, MAX_STR)


def _time(value: Any) -> float:
    return _number(value, "time", low=0.0)


def _generation(obj: dict[str, Any]) -> int:
    return _count(require(obj, "generation"), "generation", low=1)


def _pid(value: Any, name: str = "pid") -> int:
    return _count(value, name, low=1, high=MAX_PID)


def _pids(value: Any, name: str) -> list[int]:
    """Every rank's process id, in rank order (at most MAX_WORLD)."""
    return [_pid(v, name) for v in read_list(value, name, MAX_WORLD)]


def _node_indexes(value: Any, name: str) -> list[int]:
    """Every rank's node index, in rank order (at most MAX_WORLD)."""
    return [_count(v, name, 0, MAX_NODE_INDEX) for v in read_list(value, name, MAX_WORLD)]


def _opt(check: Any, value: Any, name: str) -> Any:
    return None if value is None else check(value, name)


def _json_value(value: Any, name: str) -> None:
    """Plain bounded JSON: strings bounded, keys short, depth and size capped. A number
    here may be NaN or infinite (a diverged loss, an eval metric): Python's json writes
    them, and only fields with a meaning (times, steps, lags) must be finite."""
    where = f"{name!r}" if name else "the object"
    nodes = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise WireError(f"{where} has more than {MAX_NODES} values")
        if depth > MAX_DEPTH:
            raise WireError(f"{where} nests deeper than {MAX_DEPTH}")
        if isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str) or len(k) > MAX_KEY:
                    raise WireError(f"{where} has a key longer than {MAX_KEY} characters")
                stack.append((item, depth + 1))
        elif isinstance(v, list):
            stack.extend((item, depth + 1) for item in v)
        elif isinstance(v, str):
            _str(v, name)
        elif not (v is None or isinstance(v, bool | int | float)):
            raise WireError(f"{where} holds a {type(v).__name__}")


def _check_fields(obj: dict[str, Any], checks: dict[str, Any]) -> None:
    """Fields with a known meaning are checked by type when present; the rest as bounded JSON."""
    for name, value in obj.items():
        if len(name) > MAX_KEY:
            raise WireError(f"has a key longer than {MAX_KEY} characters")
        check = checks.get(name)
        if check is not None:
            check(value, name)
        _json_value(value, name)


def _nonneg_or_none(value: Any, name: str) -> int | None:
    return _opt(_count, value, name)


def _world_or_none(value: Any, name: str) -> int | None:
    """A world size (workers training now): at least one; absent from files written before it."""
    return _opt(lambda v, n: _count(v, n, low=1), value, name)


def _number_or_none(value: Any, name: str) -> float | None:
    return _opt(_number, value, name)


def _site(value: Any, name: str) -> str:
    """A user error's ``file:line``: one short line."""
    text = read_str(value, name, MAX_SITE)
    if "\n" in text:
        raise WireError(f"{name!r} is more than one line")
    return text


def _str_or_none(value: Any, name: str) -> str | None:
    return _opt(_str, value, name)


# --- decoding ----------------------------------------------------------------------------------
@_schema
def decode(data: bytes) -> dict[str, Any]:
    """Bytes read from the channel as one JSON object; WireError for anything else."""
    obj = decode_object(data, max_bytes=MAX_BYTES, strict=False)
    _json_value(obj, "")
    return obj


# --- the records -------------------------------------------------------------------------------
class _AsWritten(ABC):
    """Records with open-ended fields read, too, as the runtime wrote them (``rec["loss"]``)."""

    @abstractmethod
    def as_dict(self) -> dict[str, Any]: ...

    def __getitem__(self, name: str) -> Any:
        return self.as_dict()[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.as_dict().get(name, default)


@dataclass(frozen=True)
class Heartbeat:
    time: float
    generation: int
    step: int
    pid: int | None


@_schema
def parse_heartbeat(obj: Any) -> Heartbeat:
    obj = read_dict(obj)
    return Heartbeat(
        time=_time(require(obj, "time")),
        generation=_generation(obj),
        step=_count(obj.get("step", 0), "step"),
        pid=_opt(_pid, obj.get("pid"), "pid"),
    )


_PROGRESS_FIELDS: dict[str, Any] = {
    "total": _nonneg_or_none,
    "loss": lambda v, n: _opt(_any_number, v, n),
    "steps_per_s": _number_or_none,
    "last_checkpoint": _str_or_none,
    "world_size": _world_or_none,
    "restored_step": _nonneg_or_none,
    # When the first step after that restore was done (an incident's end, to the step).
    "resumed_at": _number_or_none,
}


@dataclass(frozen=True)
class Progress(_AsWritten):
    time: float
    generation: int
    step: int
    fields: dict[str, Any]  # total, loss, last_checkpoint, telemetry, a search's trials...

    def as_dict(self) -> dict[str, Any]:
        return {**self.fields, "time": self.time, "generation": self.generation, "step": self.step}


@_schema
def parse_progress(obj: Any) -> Progress:
    obj = read_dict(obj)
    time_ = _time(require(obj, "time"))
    generation = _generation(obj)
    step = _count(obj.get("step", 0), "step")
    rest = {k: v for k, v in obj.items() if k not in ("time", "generation", "step")}
    _check_fields(rest, _PROGRESS_FIELDS)
    return Progress(time=time_, generation=generation, step=step, fields=rest)


# Fields the journal types on any event (journal.OPTIONAL_FIELDS) or a reader takes as is:
# a runtime event that got them wrong would make the whole journal read as damaged.
_EVENT_FIELDS: dict[str, Any] = {
    "step": _nonneg_or_none,
    "last_step": _nonneg_or_none,
    "restored_step": _nonneg_or_none,
    "lost_steps": _nonneg_or_none,
    "rank": _nonneg_or_none,
    "world_size": _world_or_none,
    "pid": lambda v, n: _opt(_pid, v, n),
    "worker_pids": lambda v, n: _opt(_pids, v, n),
    "worker_nodes": lambda v, n: _opt(_node_indexes, v, n),
    "to_region": _str_or_none,
    "region": _str_or_none,
    "rto_s": _number_or_none,
    "detected_after_s": _number_or_none,
    "lag_s": _number_or_none,
    "config": read_dict,
    "error": _str,
    "traceback": _str_or_none,
    "site": lambda v, n: _opt(_site, v, n),
    # A user error raised again when its step was run once more: the controller gives up on it.
    "deterministic": read_bool,
    # Where rank 0's restore went (train_started): seconds by phase.
    "restore_phases": lambda v, n: _opt(read_dict, v, n),
}
# Fields the controller stamps itself: the runtime must not supply them.
_RESERVED = ("ts", "by", "type_")


def _points(value: Any, name: str) -> None:
    for point in read_list(value, name, MAX_POINTS):
        if not isinstance(point, list) or len(point) != 2:
            raise WireError(f"{name!r} holds something other than a [step, loss] pair")
        _count(point[0], "points' step")
        _any_number(point[1], "points' loss")


# What the controller acts on, per kind: these must be there and be right.
_KIND_REQUIRED: dict[str, dict[str, Any]] = {
    "losses": {"points": _points},
    "replicated": {"to": _str},
    "store_fallback": {"from": _str, "to": _str},
    "user_error": {"error": _str},
    "train_started": {"restored_step": _count},
    "preempted": {"step": _count},
}


@dataclass(frozen=True)
class Event(_AsWritten):
    kind: str
    time: float
    generation: int
    fields: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """As the runtime wrote it (``type`` is the kind)."""
        return {"time": self.time, "generation": self.generation, "type": self.kind, **self.fields}


@_schema
def parse_event(obj: Any) -> Event:
    obj = read_dict(obj)
    kind = _kind(require(obj, "type"), "type")
    if kind not in EVENT_KINDS:
        raise WireError(f"is an event of unknown kind {kind!r}")
    time_ = _time(require(obj, "time"))
    generation = _generation(obj)
    for name in _RESERVED:
        if name in obj:
            raise WireError(f"carries {name!r}, which only the controller writes")
    fields = {k: v for k, v in obj.items() if k not in ("type", "time", "generation")}
    for name, check in _KIND_REQUIRED.get(kind, {}).items():
        check(require(fields, name), name)
    _check_fields(fields, _EVENT_FIELDS)
    return Event(kind=kind, time=time_, generation=generation, fields=fields)


_FINAL_FIELDS: dict[str, Any] = {
    "metrics": read_dict,
    "final_checkpoint": _str_or_none,
    "weights_sha256": _str_or_none,
    "checkpoint_sha256": _str_or_none,
    "train_steps_per_s": _number_or_none,
    "checkpoint_stall_s": _number_or_none,
    "state_bytes": _nonneg_or_none,
    "world_size": _world_or_none,
    "telemetry": lambda v, n: _opt(read_dict, v, n),
    "best_trial": lambda v, n: _opt(read_dict, v, n),
    "search": lambda v, n: _opt(read_dict, v, n),
    "trials": lambda v, n: v if isinstance(v, list) else read_dict(v, n),
}


@dataclass(frozen=True)
class Final(_AsWritten):
    time: float
    generation: int
    final_step: int
    fields: dict[str, Any]  # metrics, checkpoint, digests, telemetry, a search's trials

    def as_dict(self) -> dict[str, Any]:
        return {**self.fields, "time": self.time, "generation": self.generation, "final_step": self.final_step}


@_schema
def parse_final(obj: Any) -> Final:
    obj = read_dict(obj)
    time_ = _time(require(obj, "time"))
    generation = _generation(obj)
    final_step = _count(require(obj, "final_step"), "final_step")
    rest = {k: v for k, v in obj.items() if k not in ("time", "generation", "final_step")}
    _check_fields(rest, _FINAL_FIELDS)
    return Final(time=time_, generation=generation, final_step=final_step, fields=rest)


@dataclass(frozen=True)
class NodesWord:
    """The controller's word to a runtime on its region's nodes (recovery.elastic.decide_world)."""

    time: float
    generation: int
    fits: int  # workers the region's live (or replaced) nodes fit
    wait_until: float  # a replacement is coming until then (0: none)
    lost: tuple[int, ...]  # the nodes lost and not (yet) replaced


@_schema
def parse_nodes_word(obj: Any) -> NodesWord:
    obj = read_dict(obj)
    lost = obj.get("lost", [])
    read_list(lost, "lost", 1024)
    return NodesWord(
        time=_time(require(obj, "time")),
        generation=_generation(obj),
        fits=_count(require(obj, "fits"), "fits", low=0, high=1 << 20),
        wait_until=_number(require(obj, "wait_until"), "wait_until", low=0.0),
        lost=tuple(_count(i, "lost", low=0, high=1 << 20) for i in lost),
    )


@dataclass(frozen=True)
class ExitCode:
    time: float
    generation: int
    code: int


@_schema
def parse_exit(obj: Any) -> ExitCode:
    obj = read_dict(obj)
    return ExitCode(
        time=_time(require(obj, "time")),
        generation=_generation(obj),
        code=_count(require(obj, "code"), "code", low=-255, high=255),
    )


@dataclass(frozen=True)
class ChaosRequest:
    """The runtime reached fault ``index``'s trigger: fire it (the ``seq``-th time)."""

    time: float
    seq: int
    generation: int
    step: int
    kind: str | None = None
    rank: int | None = None
    pid: int | None = None
    during: str | None = None


@_schema
def parse_chaos_request(obj: Any) -> ChaosRequest:
    obj = read_dict(obj)
    return ChaosRequest(
        time=_time(require(obj, "time")),
        seq=_count(obj.get("seq", 1), "seq", low=1),
        # Without its generation a request could be an old attempt's, fired on the new one.
        generation=_generation(obj),
        step=_count(require(obj, "step"), "step"),
        kind=_opt(_kind, obj.get("kind"), "kind"),
        rank=_nonneg_or_none(obj.get("rank"), "rank"),
        pid=_opt(_pid, obj.get("pid"), "pid"),
        during=_opt(_kind, obj.get("during"), "during"),
    )


@dataclass(frozen=True)
class ChaosFired:
    time: float
    count: int
    steps: tuple[int | None, ...]


@_schema
def parse_chaos_fired(obj: Any) -> ChaosFired:
    obj = read_dict(obj)
    steps = obj.get("steps", [])
    read_list(steps, "steps", MAX_POINTS)
    _json_value(obj, "")
    return ChaosFired(
        time=_time(require(obj, "time")),
        count=_count(obj.get("count", 1), "count"),
        # after_s faults fire at no step (-1).
        steps=tuple(None if s is None else _count(s, "steps' step", low=-1) for s in steps),
    )


@dataclass(frozen=True)
class PreemptNotice:
    time: float
    generation: int
    pid: int | None


@_schema
def parse_preempt(obj: Any) -> PreemptNotice:
    obj = read_dict(obj)
    return PreemptNotice(
        time=_time(require(obj, "time")),
        generation=_generation(obj),
        pid=_opt(_pid, obj.get("pid"), "pid"),
    )
