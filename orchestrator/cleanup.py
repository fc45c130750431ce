"""Clean-up that never stops half-way."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def run_all(steps: Iterable[Callable[[], object]]) -> None:
    """Run every step, even after one raised, then raise the first error: a failing
    clean-up (a replicator that cannot drain, a provider that cannot tear down) must
    not skip the next one (a cluster left running, a proxy left listening)."""
    first: BaseException | None = None
    for step in steps:
        try:
            step()
        except BaseException as exc:
            if first is None:
                first = exc
    if first is not None:
        raise first
