"""What a fault's handler gets: the fault being fired (``Firing``), the injector's state it
acts on and leaves behind (``FaultState``: the provider, the stores and their proxies,
killed clusters, partitions, mounts, flapping checks, timers), and the signals it sends.
The handlers themselves are in the family modules, their table in ``handlers``."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.chaos.proxy import FaultProxy
from orchestrator.runstate.events import Event, FaultRefused
from orchestrator.wire.sections import FaultSpec
from providers.base import ClusterHandle, Provider
from recovery.store import CheckpointStore


@dataclass
class Firing:
    """One fault being fired. ``detail`` becomes the journal's ``fault_injected`` fields;
    ``at`` is when it struck (a handler that strikes later than the firing began sets it)."""

    index: int
    kind: str
    fault: FaultSpec
    req: dict[str, object]
    cluster: ClusterHandle | None
    runtime_pid: int | None
    step: int
    at: float
    detail: dict[str, object] = field(default_factory=dict)
    # Its fault_injected journaled by the handler itself (a fault on the controller, which
    # must be on record before it strikes): the caller journals it no more.
    said: bool = False

    @property
    def on(self) -> ClusterHandle:
        """The cluster a fault that needs one strikes (``Handler.needs_cluster``)."""
        assert self.cluster is not None, f"{self.kind} needs a cluster"
        return self.cluster


class FaultState:
    """What the handlers act on, and the effects of theirs that outlive a firing."""

    def __init__(
        self,
        provider: Provider,
        stores: Callable[[], list[CheckpointStore]],
        run_id: str,
        proxies: dict[str, FaultProxy],
        on_event: Callable[[Event], object],
        run_dir: str | None = None,
    ) -> None:
        self.provider = provider
        # The run's folder on the controller's machine (controller_host_loss deletes it).
        self.run_dir = run_dir
        self.stores = stores
        self.run_id = run_id
        self.proxies = proxies
        self.on_event = on_event
        self.timers: list[threading.Timer] = []
        self.killed: dict[str, float] = {}  # cluster name -> when a background fault killed it
        self.unreachable: dict[str, float] = {}  # cluster name -> end of its partition
        self.mounts: dict[str, str] = {}  # cluster name -> scratch path under a full tmpfs
        self.flaps: dict[str, tuple[int, int]] = {}  # cluster name -> (fault, health checks left to fail)
        # The nodes the training group's ranks run on, as the last train_started journaled
        # them (a drawn kill_node strikes a node that runs one, or, node_role: idle, none).
        self.worker_nodes: list[int] = []

    def say(self, event: Event) -> None:
        # Typed here, so a fault's line is checked where it is made.
        self.on_event(event)

    def later(self, seconds: float, fn: Callable[..., None], *args: Any) -> None:
        timer = threading.Timer(seconds, fn, args=args)
        timer.daemon = True
        timer.start()
        self.timers.append(timer)


@dataclass(frozen=True)
class Handler:
    """How one fault kind strikes. ``needs_cluster``: it strikes a cluster, whose region
    goes in the detail first; ``before_mark``: carried out before the fault is marked
    fired (the runtime acts on the mark at once)."""

    strike: Callable[[FaultState, Firing], None]
    needs_cluster: bool = True
    before_mark: bool = False
    # Carried out before the mark where the cluster is not on this machine: its processes
    # die when its provider says so, not with a signal from here, and the runtime, held
    # at the fault (during: checkpoint_upload), must not go on in between.
    before_mark_off_machine: bool = False

    def strikes_first(self, provider: Provider) -> bool:
        from providers.base import Capability

        return self.before_mark or (
            self.before_mark_off_machine and Capability.LOCAL_PROCESSES not in provider.capabilities
        )


def send_signal(pids: list[int], sig: int) -> list[int]:
    """``sig`` to each of ``pids``; the ones that were there to get it."""
    done = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            done.append(pid)
        except ProcessLookupError:
            pass
    return done


def sigkill(pids: list[int]) -> list[int]:
    return send_signal(pids, signal.SIGKILL)


def struck_off_machine(state: FaultState, f: Firing, problem: str | None, done: str) -> bool:
    """A fault its provider carried out where the cluster runs (``problem``: its answer,
    None once done): marked ``done`` in the fault's detail, or journaled refused with the
    provider's line. Whether it struck."""
    if problem is not None:
        state.say(FaultRefused(f.index, problem, kind=f.kind))
        f.detail["refused"] = problem
        return False
    f.detail[done] = True
    return True
