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
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from recovery.store import CheckpointStore

FENCE_NAME = "FENCE.json"


class FencedError(RuntimeError):
    """This attempt has been superseded: its writes must not commit."""


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
        return Lineage((*self.links, Link(generation, restored_step)))

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

    def to_json(self) -> str:
        return json.dumps({"links": [[k.generation, k.restored_step] for k in self.links]})

    @staticmethod
    def from_json(text: str | bytes) -> Lineage:
        d = json.loads(text)
        return Lineage(tuple(Link(int(g), int(s)) for g, s in d["links"]))


def fence_path(store: CheckpointStore, run_id: str) -> str:
    return f"{store.root}/{run_id}/{FENCE_NAME}"


def read_fence(store: CheckpointStore, run_id: str) -> Lineage | None:
    try:
        return Lineage.from_json(store.fs.cat_file(fence_path(store, run_id)))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError):
        return None  # a torn fence is no fence; the next attempt rewrites it


def newest_fence(stores: list[CheckpointStore], run_id: str) -> Lineage:
    """The lineage with the highest generation among the stores that answer."""
    best = Lineage()
    for store in stores:
        try:
            lineage = read_fence(store, run_id)
        except Exception:  # an unreachable store tells nothing
            continue
        if lineage is not None and lineage.generation > best.generation:
            best = lineage
    return best
