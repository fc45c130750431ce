"""The table of fault handlers: one for every kind the wire names
(``orchestrator.wire.faults.FaultKind``), gathered from the family modules and checked
when this module loads, so a kind added to the wire without a handler (or given two)
fails at once rather than when its fault fires."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from orchestrator.chaos import disk, network, processes, storage
from orchestrator.chaos.firing import Handler
from orchestrator.wire.faults import FAULT_KINDS, FaultKind

FAMILIES: dict[str, Mapping[FaultKind, Handler]] = {
    "processes": processes.HANDLERS,
    "storage": storage.HANDLERS,
    "disk": disk.HANDLERS,
    "network": network.HANDLERS,
}


def gather(families: Mapping[str, Mapping[FaultKind, Handler]], kinds: Iterable[str]) -> dict[str, Handler]:
    """One table from the families' handlers; ValueError naming the kind when one has
    two handlers, none, or is no kind of ``kinds``."""
    table: dict[str, Handler] = {}
    owner: dict[str, str] = {}
    for family, handlers in families.items():
        for kind, handler in handlers.items():
            if str(kind) in table:
                raise ValueError(
                    f"fault kind {str(kind)!r} has two handlers: in chaos.{owner[str(kind)]} and chaos.{family}"
                )
            table[str(kind)], owner[str(kind)] = handler, family
    expected = [str(k) for k in kinds]
    missing = [k for k in expected if k not in table]
    if missing:
        raise ValueError(f"fault kinds without a handler: {', '.join(missing)}; add one to a chaos family module")
    extra = sorted(set(table) - set(expected))
    if extra:
        raise ValueError(f"handlers for kinds the wire does not name: {', '.join(extra)} (orchestrator.wire.faults)")
    return table


HANDLERS: dict[str, Handler] = gather(FAMILIES, FAULT_KINDS)


def handler_for(kind: str) -> Handler:
    """The handler of ``kind``; ValueError for a kind the wire does not name."""
    try:
        return HANDLERS[str(kind)]
    except KeyError:
        raise ValueError(f"unknown fault kind {kind!r}; known kinds: {', '.join(HANDLERS)}") from None
