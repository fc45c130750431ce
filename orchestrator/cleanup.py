"""Clean-up that never stops half-way."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from orchestrator.runstate.events import Event, Teardown
from providers.base import ClusterHandle, Provider


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


def tear_down(
    provider: Provider,
    emit: Callable[[Event], object],
    cluster: ClusterHandle,
    reason: str | None = None,
    purpose: str | None = None,
) -> None:
    """Tear ``cluster`` down and journal it (``teardown``, with how long it took and
    why): the one way every part of the controller ends a cluster, so that replay
    and the sweep after a crash see every one of them the same way. ``emit`` journals
    the event (the controller's, which also applies it to the run's state)."""
    t0 = time.time()
    provider.teardown(cluster)
    emit(Teardown(cluster=cluster.name, seconds=round(time.time() - t0, 3), reason=reason, purpose=purpose))
