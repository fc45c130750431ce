"""What the parts of the control loop share, instead of the controller itself.

The run's wiring (``wiring``) builds one ``RunContext`` per run and hands it to the
controller, the attempt runner, the watch, the standby manager and the resume. They
read the run's config, provider, stores and control channel from it, act, and say what
happened through ``emit``, which journals the event and folds it into the run's one
state (``listeners.RunEvents``); what they read of that state (the lineage, the clusters
the run owns) comes from there too.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from orchestrator.config.schema import Config
from orchestrator.control import naming
from orchestrator.wire.control import ControlChannel
from providers.base import Capability, Provider
from recovery.fencing import Lineage
from recovery.keys import AttemptKeys
from recovery.store import CheckpointStore


class Progress(Protocol):
    """The live progress line (orchestrator/control/progress.py), or a test's stand-in.
    ``stream``: where a warning goes, shown whether the line is or not."""

    stream: TextIO

    def note(self, text: str) -> None: ...

    def log(self, line: str) -> None: ...

    def update(self, region: str, generation: int, prog: dict[str, Any]) -> None: ...

    def replication_lag(self, lag_s: float) -> None: ...

    def close(self) -> None: ...


class Metrics(Protocol):
    """The run's TensorBoard writer (orchestrator/metrics/board.py) as the watch and the
    controller feed it (what the journal does not carry: losses, progress, the final report)."""

    def losses(self, points: list[Any], at: float) -> None: ...

    def progress(self, prog: dict[str, Any]) -> None: ...

    def final(self, final: dict[str, Any]) -> None: ...


class Replication(Protocol):
    """The replicator: started with the control loop, told which store to copy from now,
    stopped at the end (draining what is queued when the run succeeded)."""

    def follow(self, source: CheckpointStore, stores: list[CheckpointStore]) -> None: ...

    def start(self) -> None: ...

    def stop(self, drain: bool = True) -> None: ...


class _Quiet:
    stream: TextIO = sys.stderr

    def note(self, text: str) -> None:
        pass

    def log(self, line: str) -> None:
        pass

    def update(self, region: str, generation: int, prog: dict[str, Any]) -> None:
        pass

    def replication_lag(self, lag_s: float) -> None:
        pass

    def close(self) -> None:
        pass


class _Unwritten:
    def losses(self, points: list[Any], at: float) -> None:
        pass

    def progress(self, prog: dict[str, Any]) -> None:
        pass

    def final(self, final: dict[str, Any]) -> None:
        pass


class _Still:
    def follow(self, source: CheckpointStore, stores: list[CheckpointStore]) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self, drain: bool = True) -> None:
        pass


@dataclass
class RunContext:
    run_id: str
    run_dir: str
    cfg: Config
    provider: Provider
    control: ControlChannel
    # Journal one event; the run's emit (RunEvents.emit) also folds it into the run's state and tells its listeners.
    emit: Callable[..., Any]
    stores: dict[str, CheckpointStore] = field(default_factory=dict)
    candidates: list[str] = field(default_factory=list)
    progress: Progress = field(default_factory=_Quiet)
    metrics: Metrics = field(default_factory=_Unwritten)
    replicator: Replication = field(default_factory=_Still)
    # Fault proxies in front of the regions' stores (region -> FaultProxy), when a storage fault is configured.
    proxies: dict[str, Any] = field(default_factory=dict)
    # The run's keys (the controller's: every generation, and fence signing); an attempt's
    # runtime gets its own generation's share of them in its environment only (never journaled).
    run_key: AttemptKeys | None = field(default=None, repr=False)
    # The fencing lineage as the run's state has it now.
    lineage: Callable[[], Lineage] = Lineage
    # The run's lifecycle moved (RunEvents.to): the attempt says when its runtime is up.
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
