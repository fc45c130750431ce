"""What the parts of the control loop share, instead of the controller itself.

The controller builds one ``RunContext`` per run and hands it to the attempt runner,
the watch, the standby manager and adoption. They read the run's config, provider,
stores and control channel from it, act, and say what happened through ``emit``;
only the controller holds the run's state and applies what they emit to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.config.schema import Config
from orchestrator.control import naming
from orchestrator.wire.control import ControlChannel
from providers.base import Capability, Provider
from recovery.fencing import Lineage
from recovery.keys import AttemptKeys
from recovery.store import CheckpointStore


class Progress(Protocol):
    """The live progress line (orchestrator/control/progress.py), or a test's stand-in."""

    def note(self, text: str) -> None: ...

    def log(self, line: str) -> None: ...

    def update(self, region: str, generation: int, prog: dict[str, Any]) -> None: ...

    def replication_lag(self, lag_s: float) -> None: ...


class Metrics(Protocol):
    """The run's TensorBoard writer (orchestrator/metrics/board.py) as the watch feeds it."""

    def losses(self, points: list[Any], at: float) -> None: ...

    def progress(self, prog: dict[str, Any]) -> None: ...


class Follower(Protocol):
    """The replicator, as the attempt sees it: which store to copy from now."""

    def follow(self, source: CheckpointStore, stores: list[CheckpointStore]) -> None: ...


class _Quiet:
    def note(self, text: str) -> None:
        pass

    def log(self, line: str) -> None:
        pass

    def update(self, region: str, generation: int, prog: dict[str, Any]) -> None:
        pass

    def replication_lag(self, lag_s: float) -> None:
        pass


class _Unwritten:
    def losses(self, points: list[Any], at: float) -> None:
        pass

    def progress(self, prog: dict[str, Any]) -> None:
        pass


class _Still:
    def follow(self, source: CheckpointStore, stores: list[CheckpointStore]) -> None:
        pass


@dataclass
class RunContext:
    run_id: str
    run_dir: str
    cfg: Config
    provider: Provider
    control: ControlChannel
    # Journal one event: (type, **fields). The controller's emit also applies it to the run's state.
    emit: Callable[..., Any]
    stores: dict[str, CheckpointStore] = field(default_factory=dict)
    candidates: list[str] = field(default_factory=list)
    progress: Progress = field(default_factory=_Quiet)
    metrics: Metrics = field(default_factory=_Unwritten)
    replicator: Follower = field(default_factory=_Still)
    # Fault proxies in front of the regions' stores (region -> FaultProxy), when a storage fault is configured.
    proxies: dict[str, Any] = field(default_factory=dict)
    # The run's keys (the controller's: every generation, and fence signing); an attempt's
    # runtime gets its own generation's share of them in its environment only (never journaled).
    run_key: AttemptKeys | None = field(default=None, repr=False)
    # The fencing lineage as the run's state has it now (the controller's, read through this).
    lineage: Callable[[], Lineage] = Lineage
    # The controller's state machine: the attempt says when its runtime is up.
    transition: Callable[..., object] = lambda *_a, **_k: None
    clock: Callable[[], float] = time.time
    # Lines emitted inside are made durable together, on the way out (Journal.batch).
    batch: Callable[[], AbstractContextManager[object]] = nullcontext
    # The run's clusters the journal shows provisioned and not torn down (by name).
    owned: Callable[[], Collection[str]] = frozenset
    # Lost clusters whose node runtime was kept, not swept yet: name -> provisioned (its JSON).
    kept_runtimes: Callable[[], Mapping[str, dict[str, Any]]] = dict

    def cluster_name(self, region: str, generation: int) -> str:
        """The name to launch the attempt (or standby) of ``generation`` under
        (orchestrator/control/naming.py: one per run and region where the provider
        keeps node runtimes, and only while no cluster of the run holds it)."""
        return naming.cluster_name(
            self.run_id,
            region,
            generation,
            keeps_runtime=keeps_runtime(self.provider),
            owned=self.owned(),
            in_use=lambda name: bool(self.provider.in_use(name)),  # type: ignore[attr-defined]
        )

    def store_options(self, region: str) -> dict[str, Any]:
        return store_options(self.cfg, self.proxies, region)


def keeps_runtime(provider: Provider | None) -> bool:
    """Does ``provider`` leave a lost cluster's node runtime for a launch under its name
    to find (Capability.KEEPS_RUNTIME; its ``teardown(keep_runtime=...)``, ``in_use`` and
    ``sweep_runtime`` go with it)? The local provider does not."""
    return provider is not None and Capability.KEEPS_RUNTIME in provider.capabilities


def store_options(cfg: Config, proxies: dict[str, Any], region: str) -> dict[str, Any]:
    """A region's storage options as everyone uses them: through its fault proxy, if any."""
    opts = dict(cfg.cloud.regions[region].storage_options)
    if region in proxies:
        opts["endpoint_url"] = proxies[region].endpoint
    return opts
