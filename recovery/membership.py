"""Who belongs to each formation of a worker group's process group, and where each
rank's state comes from when survivors keep their processes.

A worker group's process group is formed at an *epoch*: the first at 0, and once more
each time lost workers are replaced while the survivors keep running. The driver
writes each epoch's members (a pid per rank) signed with the attempt generation's key;
a process joins only an epoch whose signed record names it, at its own rank, with its
own pid. So a rank of an older generation (whose keys cannot reach this generation's
key) cannot read the record as valid, and a process the group replaced (its pid no
longer named) cannot take a rank again: both are refused before they touch the group.

Pure: the record, its signature and the admission rule; the plan of which rank sends
which file of the committed checkpoint to which other rank.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass

# A record names one pid per rank; the wire's bound on a world.
MAX_RANKS = 4096
MAX_RECORD_BYTES = 64 * 1024
MODES = ("start", "join")


class MembershipError(ValueError):
    """A members record that is malformed, too large, or not signed with this generation's key."""


@dataclass(frozen=True)
class Members:
    """Epoch ``epoch``'s members: ``pids[r]`` is rank r's process. ``mode`` "start": a new
    world, every rank restores from the store; "join": survivors kept their processes and
    ``joining`` ranks are new, each rank's state comes from the ranks that hold it."""

    run_id: str
    generation: int
    epoch: int
    pids: tuple[int, ...]
    mode: str = "start"
    joining: tuple[int, ...] = ()

    def payload(self) -> bytes:
        body = {
            "run_id": self.run_id,
            "generation": self.generation,
            "epoch": self.epoch,
            "pids": list(self.pids),
            "mode": self.mode,
            "joining": list(self.joining),
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    def to_wire(self, key: bytes) -> bytes:
        mac = hmac.new(key, self.payload(), hashlib.sha256).hexdigest()
        return json.dumps({"members": json.loads(self.payload()), "mac": mac}, sort_keys=True).encode()

    @staticmethod
    def from_wire(data: bytes, key: bytes | None) -> Members:
        """The record in ``data``, its signature checked with ``key`` (None: this process
        holds no key for the record's generation, so nothing it says is trusted)."""
        if len(data) > MAX_RECORD_BYTES:
            raise MembershipError(f"a members record of {len(data)} bytes (at most {MAX_RECORD_BYTES})")
        try:
            outer = json.loads(data)
            body, mac = outer["members"], outer["mac"]
            members = Members(
                run_id=_text(body["run_id"]),
                generation=_count(body["generation"]),
                epoch=_count(body["epoch"]),
                pids=tuple(_count(p) for p in _list(body["pids"])),
                mode=_text(body["mode"]),
                joining=tuple(_count(r) for r in _list(body["joining"])),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise MembershipError(f"a malformed members record: {exc}") from None
        if members.mode not in MODES:
            raise MembershipError(f"a members record of mode {members.mode!r} (one of {', '.join(MODES)})")
        if not 0 < len(members.pids) <= MAX_RANKS or any(r >= len(members.pids) for r in members.joining):
            raise MembershipError(f"a members record of {len(members.pids)} ranks, joining {list(members.joining)}")
        if key is None:
            raise MembershipError(f"signed for generation {members.generation}, beyond this process's keys")
        want = hmac.new(key, members.payload(), hashlib.sha256).hexdigest()
        if not isinstance(mac, str) or not hmac.compare_digest(mac, want):
            raise MembershipError(f"epoch {members.epoch}'s members record is not signed with this generation's key")
        return members


def _text(value: object) -> str:
    if not isinstance(value, str) or len(value) > 512:
        raise ValueError(f"expected a short string, got {type(value).__name__}")
    return value


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a count, got {value!r}")
    return value


def _list(value: object) -> list[object]:
    if not isinstance(value, list) or len(value) > MAX_RANKS:
        raise ValueError("expected a list of at most MAX_RANKS items")
    return value


def admit(members: Members, *, run_id: str, generation: int, epoch: int, rank: int, pid: int) -> str | None:
    """Why this process may not join epoch ``epoch`` as ``rank`` (None: it may)."""
    if members.run_id != run_id:
        return f"the record is run {members.run_id!r}'s, not {run_id!r}'s"
    if members.generation != generation:
        return f"the group is generation {members.generation}'s; this process is generation {generation}'s (fenced)"
    if members.epoch != epoch:
        return f"the record is epoch {members.epoch}'s, not epoch {epoch}'s"
    if not 0 <= rank < len(members.pids):
        return f"rank {rank} is not in a group of {len(members.pids)}"
    if members.pids[rank] != pid:
        return f"rank {rank} of epoch {epoch} is process {members.pids[rank]}, not {pid} (replaced)"
    return None


@dataclass(frozen=True)
class Transfer:
    """One file of the committed checkpoint, sent by rank ``src`` to rank ``dst``."""

    name: str
    src: int
    dst: int


def plan_transfers(
    needed: dict[int, list[str]], held: dict[int, list[str]]
) -> tuple[list[Transfer], dict[int, list[str]]]:
    """Which rank sends which file to which, and what each rank must read from the store.

    ``needed[r]``: the files rank r loads; ``held[r]``: the files rank r holds in memory
    (already checked against the signed manifest by their holder). A rank uses its own
    copy; a file it lacks comes from the lowest rank that holds it, else from the store.
    The transfers are in one order every rank computes alike (a rank takes part in its
    own in that order: the exchange cannot deadlock).
    """
    transfers: list[Transfer] = []
    from_store: dict[int, list[str]] = {}
    for dst in sorted(needed):
        mine = set(held.get(dst, ()))
        for name in sorted(set(needed[dst])):
            if name in mine:
                continue
            holders = sorted(r for r, names in held.items() if r != dst and name in names)
            if holders:
                transfers.append(Transfer(name, holders[0], dst))
            else:
                from_store.setdefault(dst, []).append(name)
    transfers.sort(key=lambda t: (t.name, t.dst))
    return transfers, from_store
