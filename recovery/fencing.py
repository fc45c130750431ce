"""Fencing: a zombie of an old attempt can never make its checkpoints win.

Every attempt has a generation. When generation g starts from step N, the
controller appends (g, N) to the run's lineage and writes it as FENCE.json into
every store it can reach. Then:

- the uploader of an older attempt reads the fence before committing, and does
  not commit (a fenced write, journaled);
- restore only takes checkpoints on the lineage: one written by attempt a counts
  only up to the step the next generation after a restored from. What a zombie
  wrote past that point, fence or no fence (a store it reached while the fence
  did not), is never restored.

Generations only go up: a new attempt's exceeds every fence found in any store
(``first_generation``), and a fence that cannot be read (the store did not answer)
is a store error, never "no fence": a zombie cannot commit past one, and nobody
reads one as permission. A fence this run's controller did not sign (forged,
malformed, not a regular file) is ignored: it can neither stop nor allow anything.

This module is the rule, pure; reading and writing fences in a store is the store's
(``recovery/store.py``: ``read_fence``, ``scan_fences``, ``CheckpointStore.write_fence``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from recovery.boundedjson import decode

FENCE_NAME = "FENCE.json"
# A fence names one link per generation; a run has at most 2**16 of them.
MAX_LINKS = 1 << 16
MAX_FENCE_BYTES = 2 * 2**20
_FENCE_LABEL = b"orchestrator fence v1\0"


class FencedError(RuntimeError):
    """This attempt has been superseded: its writes must not commit."""


class FenceRejected(ValueError):
    """A fence in a store that this run did not sign, or that does not parse: ignored, with this reason."""


@dataclass(frozen=True)
class Link:
    generation: int
    restored_step: int


@dataclass(frozen=True)
class Lineage:
    links: tuple[Link, ...] = ()

    @property
    def generation(self) -> int:
        return max((link.generation for link in self.links), default=0)

    def then(self, generation: int, restored_step: int) -> Lineage:
        """The lineage with ``generation`` restarting from ``restored_step``. The last link's
        own generation is moved, not repeated: a handover whose stores held a newer commit
        of the attempt it takes over from, found once they were fenced, restarts from there."""
        links = self.links
        if links and links[-1].generation == generation:
            links = links[:-1]
        return Lineage((*links, Link(generation, restored_step)))

    def newer_than(self, other: Lineage) -> bool:
        """Whether this fence supersedes ``other``: a higher generation, or the same one
        moved to a later step (the controller only ever moves a link forward)."""
        if self.generation != other.generation:
            return self.generation > other.generation
        mine, theirs = self.links[-1:], other.links[-1:]
        return bool(mine and theirs) and mine[0].restored_step > theirs[0].restored_step

    def allows(self, attempt: int, step: int) -> bool:
        """Whether a checkpoint written by ``attempt`` at ``step`` is on the lineage."""
        later = [link for link in self.links if link.generation > attempt]
        if not later:
            return True
        successor = min(later, key=lambda link: link.generation)
        return step <= successor.restored_step

    def why_not(self, attempt: int, step: int) -> str:
        later = min((link for link in self.links if link.generation > attempt), key=lambda k: k.generation)
        return (
            f"fenced: written by attempt {attempt} at step {step}, after attempt {later.generation} "
            f"had restarted from step {later.restored_step}"
        )

    def to_plain(self) -> list[list[int]]:
        return [[k.generation, k.restored_step] for k in self.links]

    @staticmethod
    def from_plain(links: object) -> Lineage:
        """A lineage from ``[[generation, restored_step], ...]``; ValueError naming what is wrong."""
        if not isinstance(links, list):
            raise ValueError(f"expected a list of [generation, restored_step] pairs, got {type(links).__name__}")
        if len(links) > MAX_LINKS:
            raise ValueError(f"a lineage of {len(links)} links, more than the {MAX_LINKS} a run can have")
        out: list[Link] = []
        for item in links:
            if (
                not isinstance(item, list | tuple)
                or len(item) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)
            ):
                raise ValueError(f"expected [generation, restored_step] as two integers, got {item!r}")
            g, s = item
            if g < 1 or s < 0:
                raise ValueError(f"expected generation >= 1 and restored_step >= 0, got {[g, s]!r}")
            if out and g <= out[-1].generation:
                raise ValueError(f"generations must increase along a lineage: {g} after {out[-1].generation}")
            out.append(Link(g, s))
        return Lineage(tuple(out))


class Admits(Protocol):
    """What restore, replication and retention ask of a lineage."""

    def allows(self, attempt: int, step: int) -> bool: ...

    def why_not(self, attempt: int, step: int) -> str: ...


@dataclass(frozen=True)
class Narrowed:
    """The controller's lineage, narrowed by the newest fence the stores hold: a
    checkpoint counts only if both allow it. The fence can refuse what a stale copy
    of the lineage would let through (a standby started before the last handover);
    it can never allow what the controller's lineage refuses."""

    lineage: Lineage
    fence: Lineage = field(default_factory=Lineage)

    def allows(self, attempt: int, step: int) -> bool:
        return self.lineage.allows(attempt, step) and self.fence.allows(attempt, step)

    def why_not(self, attempt: int, step: int) -> str:
        if not self.lineage.allows(attempt, step):
            return self.lineage.why_not(attempt, step)
        return self.fence.why_not(attempt, step) + " (by the stores' fence)"


def first_generation(journaled: int, fences: int) -> int:
    """The generation the next attempt must exceed: the highest the journal knows and
    any store holds. A fence from an earlier life of the run (or one written just
    before a crash, unjournaled) must not be met by a lower or equal generation,
    or its checkpoints would pass for the new attempt's, and its rules be undone."""
    return max(journaled, fences, 0)


def fence_payload(run_id: str, lineage: Lineage) -> bytes:
    """What a fence's signature covers: the run and its lineage, canonical."""
    body = json.dumps({"links": lineage.to_plain(), "run_id": run_id}, sort_keys=True, separators=(",", ":"))
    return _FENCE_LABEL + body.encode()


def encode_fence(run_id: str, lineage: Lineage, sign: Callable[[bytes], str]) -> bytes:
    """A fence as written to a store, signed by ``sign`` (the controller's fence key)."""
    signature = sign(fence_payload(run_id, lineage))
    return json.dumps({"links": lineage.to_plain(), "run_id": run_id, "signature": signature}).encode()


def decode_fence(raw: bytes, run_id: str, verifies: Callable[[bytes, str], bool]) -> Lineage:
    """The lineage of a fence read from a store, only if this run's controller signed it
    for this run; FenceRejected with the reason otherwise (a fence that does not verify
    can neither raise nor lower a generation: it is read as no fence)."""
    try:
        d = decode(raw, max_bytes=MAX_FENCE_BYTES, max_depth=4)
        if not isinstance(d, dict):
            raise ValueError(f"expected an object, got {type(d).__name__}")
        lineage = Lineage.from_plain(d.get("links"))
    except ValueError as exc:
        raise FenceRejected(f"malformed fence: {exc}") from None
    signature = d.get("signature")
    if not isinstance(signature, str) or not signature:
        raise FenceRejected("unsigned fence: not written by this run's controller")
    if d.get("run_id") != run_id:
        raise FenceRejected(f"a fence of another run ({str(d.get('run_id'))[:64]!r})")
    if not verifies(fence_payload(run_id, lineage), signature):
        raise FenceRejected("fence signature does not verify: not written by this run's controller")
    return lineage
