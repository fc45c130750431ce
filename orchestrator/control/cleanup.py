"""Clean-up that never stops half-way."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from orchestrator.control.context import keeps_runtime
from orchestrator.runstate.events import Event, LogsKept, RuntimeSwept, Teardown
from orchestrator.wire.logfiles import KeptLogs
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
    logs_to: str | None = None,
    generation: int | None = None,
) -> None:
    """Tear ``cluster`` down and journal it (``teardown``, with how long it took and
    why): the one way every part of the controller ends a cluster, so that replay
    and the sweep after a crash see every one of them the same way. ``emit`` journals
    the event (the controller's, which also applies it to the run's state).

    ``logs_to``: the attempt's folder, where the ranks' logs are copied first (journaled
    as ``logs_kept``, with why none were when they could not be)."""
    if logs_to is not None:
        kept = keep_logs(provider, cluster, logs_to)
        emit(
            LogsKept(
                cluster=cluster.name,
                generation=generation,
                ranks=kept.ranks,
                bytes=kept.bytes,
                cut=kept.cut,
                error=kept.error,
            )
        )
    t0 = time.time()
    # A provider that keeps a lost cluster's runtime says whether it did; the run's end
    # sweeps what was kept (sweep_runtimes).
    if keeps_runtime(provider):
        kept = provider.teardown(cluster, keep_runtime=True)  # type: ignore[call-arg,func-returns-value]
    else:
        kept = provider.teardown(cluster)  # type: ignore[func-returns-value]
    emit(
        Teardown(
            cluster=cluster.name,
            seconds=round(time.time() - t0, 3),
            reason=reason,
            purpose=purpose,
            runtime_kept=True if kept else None,
        )
    )


def sweep_runtimes(provider: Provider, emit: Callable[[Event], object], kept: Mapping[str, ClusterHandle]) -> None:
    """Remove what the run's lost clusters kept of their node runtimes (``runtime_swept``
    each): the run is over, no launch will look for them. A failure is journaled, never
    raised: it leaves files, not a cluster."""
    for name, handle in kept.items():
        try:
            provider.sweep_runtime(handle)  # type: ignore[attr-defined]
        except Exception as exc:
            emit(RuntimeSwept(cluster=name, error=f"{type(exc).__name__}: {exc}"[:500]))
        else:
            emit(RuntimeSwept(cluster=name))


def keep_logs(provider: Provider, cluster: ClusterHandle, dest_dir: str) -> KeptLogs:
    """The provider's copy of the cluster's rank logs; a failure to copy is what was
    kept (nothing, and why), never a reason to leave the cluster up."""
    try:
        kept = provider.keep_logs(cluster, dest_dir)
    except Exception as exc:
        return KeptLogs(error=f"{type(exc).__name__}: {exc}"[:500])
    return kept if isinstance(kept, KeptLogs) else KeptLogs(error=f"provider {provider.name} kept no logs")
