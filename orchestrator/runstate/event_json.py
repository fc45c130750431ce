"""The journal's JSON form of an event (``orchestrator.runstate.events``), both ways.

``from_json`` is the only way a journal line becomes an event and ``to_json`` the only
way back. Each declared field is read by its annotation with the wire's codec
(``orchestrator.wire.codec``); a line that lacked an optional field is written back
without it. What the runtime said (``runtime.<kind>``, or a bare kind by
``runtime``/``zombie`` in journals from before the namespace) reads as one
``RuntimeReport``, carried as it came; a type this code base does not know reads as
``Unknown`` (for display), and is refused at write time.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from enum import StrEnum
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints

from orchestrator.runstate.events import (
    EVENT_TYPES,
    RUNTIME_PREFIX,
    RUNTIME_SOURCES,
    Event,
    RuntimeReport,
    Unknown,
    type_of,
)
from orchestrator.wire.codec import (
    json_is,
    json_type,
    read_bool,
    read_choice,
    read_dict,
    read_float,
    read_int,
    read_items,
    read_str,
    read_values,
    require,
)
from recovery.boundedjson import CodecError

_NUMBER = (int, float)
_NONE = type(None)


class EventError(ValueError):
    """A JSON object that is no event of ours; the message names the field."""


# Typed on any event, declared or not (runtime reports, unknown types, free-form extras):
# status, report and result.json format these as numbers or names.
COMMON_FIELDS: dict[str, tuple[type, ...]] = {
    "config": (dict,),
    "generation": (int, _NONE),
    "step": (int, _NONE),
    "last_step": (int, _NONE),
    "restored_step": (int, _NONE),
    "lost_steps": (int, _NONE),
    "to_region": (str, _NONE),
    "rto_s": (*_NUMBER, _NONE),
    "detected_after_s": (*_NUMBER, _NONE),
    "lag_s": (*_NUMBER, _NONE),
}

# JSON value and its key -> attribute value; raises CodecError naming the key.
Parse = Callable[[Any, str], Any]


@dataclass(frozen=True)
class _Spec:
    attr: str
    key: str
    required: bool
    parse: Parse
    dump: Callable[[Any], Any]


def _number(value: Any, name: str) -> Any:
    # Checked as a finite number, kept as written: an integer stays one in the line written back.
    read_float(value, name)
    return value


def _converters(tp: Any) -> tuple[Parse, Callable[[Any], Any]]:
    """(parse, dump) for an annotation: scalars, closed sets, X | None, tuple[X, ...], dict[str, X]."""
    same: Callable[[Any], Any] = lambda v: v  # noqa: E731
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not _NONE]
        parse_inner, dump_inner = _converters(inner[0])
        return (
            lambda v, n: None if v is None else parse_inner(v, n),
            lambda v: None if v is None else dump_inner(v),
        )
    if tp is Any:
        return lambda v, n: v, same
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        enum = tp
        return lambda v, n: read_choice(v, n, enum), str
    scalar: dict[Any, Parse] = {float: _number, int: read_int, str: read_str, bool: read_bool}
    if tp in scalar:
        return scalar[tp], same
    if origin is tuple:
        item, _ = _converters(args[0])
        return lambda v, n: tuple(read_items(v, n, item)), list
    if origin is dict:
        value_parse, _ = _converters(args[1])
        return lambda v, n: read_values(v, n, value_parse), dict
    raise TypeError(f"no JSON form for {tp!r}")


_NOT_FIELDS = frozenset({"ts", "omitted", "extra"})


@cache
def _specs(cls: type[Event]) -> tuple[_Spec, ...]:
    hints = get_type_hints(cls)
    out = []
    for f in fields(cls):
        if f.name in _NOT_FIELDS:
            continue
        parse, dump = _converters(hints[f.name])
        required = f.default is MISSING and f.default_factory is MISSING
        out.append(_Spec(f.name, f.metadata.get("key", f.name), required, parse, dump))
    return tuple(out)


def _common_problem(fields_: dict[str, Any]) -> str | None:
    for name, kinds in COMMON_FIELDS.items():
        if name in fields_ and not json_is(fields_[name], kinds):
            return f"has {name!r} of type {json_type(fields_[name])}"
    return None


def from_json(obj: Any) -> Event:
    """The event a journal line holds; EventError naming the field if it is none of ours."""
    try:
        line = read_dict(obj)
        type_ = read_str(require(line, "type"), "type")
        ts = _number(require(line, "ts"), "ts")
    except CodecError as exc:
        raise EventError(str(exc)) from None
    rest = {k: v for k, v in line.items() if k not in ("ts", "type")}
    cls = EVENT_TYPES.get(type_)
    runtime = type_.startswith(RUNTIME_PREFIX) or rest.get("by") in RUNTIME_SOURCES
    if runtime or cls is None:
        problem = _common_problem(rest)
        if problem is not None:
            raise EventError(f"({type_}) {problem}")
        if runtime:
            legacy = not type_.startswith(RUNTIME_PREFIX)
            kind = type_ if legacy else type_[len(RUNTIME_PREFIX) :]
            return RuntimeReport(kind=kind, fields=rest, legacy=legacy, ts=ts)
        return Unknown(type_=type_, fields=rest, ts=ts)
    return _parse(cls, rest, ts)


def _parse(cls: type[Event], rest: dict[str, Any], ts: float) -> Event:
    kwargs: dict[str, Any] = {}
    omitted = []
    for spec in _specs(cls):
        if spec.key not in rest:
            if spec.required:
                raise EventError(f"({cls.TYPE}) lacks {spec.key!r}")
            omitted.append(spec.attr)
            continue
        try:
            kwargs[spec.attr] = spec.parse(rest[spec.key], spec.key)
        except CodecError as exc:
            raise EventError(f"({cls.TYPE}) {exc}") from None
    declared = {s.key for s in _specs(cls)}
    free = {k: v for k, v in rest.items() if k not in declared}
    if "extra" in {f.name for f in fields(cls)}:
        problem = _common_problem(free)
        if problem is not None:
            raise EventError(f"({cls.TYPE}) {problem}")
        kwargs["extra"] = free
    elif free:
        raise EventError(f"({cls.TYPE}) has {sorted(free)[0]!r}, a field no {cls.TYPE} event has")
    return cls(**kwargs, ts=ts, omitted=frozenset(omitted))


def to_json(event: Event) -> dict[str, Any]:
    """The journal line for ``event``: ``ts``, ``type``, then its fields under their JSON keys."""
    out: dict[str, Any] = {"ts": event.ts, "type": type_of(event)}
    if isinstance(event, RuntimeReport | Unknown):
        out.update(event.fields)
        return out
    for spec in _specs(type(event)):
        value = getattr(event, spec.attr)
        if spec.attr in event.omitted or (value is None and spec.attr in event.SPARSE):
            continue
        out[spec.key] = spec.dump(value)
    extra: dict[str, Any] = getattr(event, "extra", {})
    clash = sorted(set(extra) & set(out))
    if clash:
        raise EventError(f"({type_of(event)}) has {clash[0]!r} both as a field and in its extra")
    out.update(extra)
    return out


def payload(event: Event) -> dict[str, Any]:
    """The line's fields without ``ts`` and ``type``: what a ``(type, fields)`` hook takes."""
    return {k: v for k, v in to_json(event).items() if k not in ("ts", "type")}
