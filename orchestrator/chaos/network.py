"""Faults between the controller and a cluster: a partition (the runtime's driver, or the
whole cluster, frozen and then resumed: a zombie that fencing must stop), the ssh
connection to the runtime cut, the provider's health checks failing for a while."""

from __future__ import annotations

import signal
import time

from orchestrator.chaos.firing import FaultState, Firing, Handler, send_signal, struck_off_machine
from orchestrator.runstate.events import FaultEnded, FaultFailed
from orchestrator.wire.faults import FaultKind
from providers.base import Capability, ClusterHandle, lacks

# After a partition heals, the zombie runs this long before the control plane reaches it again.
ZOMBIE_WINDOW_S = 8.0
PARTITION_S = 10.0
PARTITION_REGION_S = 5.0


def _partition(state: FaultState, f: Firing) -> None:
    # partition: the driver, which renews the lease, stops reaching the control
    # store while the workers train on and try to commit (a zombie that fencing
    # must stop). partition_region: the whole cluster frozen, then resumed.
    cluster = f.on
    off_machine = f.kind == "partition_region" and Capability.LOCAL_PROCESSES not in state.provider.capabilities
    pids: list[int] = []
    if off_machine:
        # Off this machine (SkyPilot on Slurm): frozen where it runs, by its provider.
        if not struck_off_machine(state, f, state.provider.freeze_cluster(cluster), "frozen"):  # type: ignore[attr-defined]
            return
    else:
        if f.kind == "partition":
            pids = [f.runtime_pid] if f.runtime_pid else []
        else:
            pids = state.provider.processes(cluster)
        f.detail["stopped"] = len(send_signal(pids, signal.SIGSTOP))
    f.at = time.time()
    duration = f.fault.duration_s or (PARTITION_S if f.kind == "partition" else PARTITION_REGION_S)
    state.unreachable[cluster.name] = f.at + duration + ZOMBIE_WINDOW_S
    state.later(duration, _resume, state, f.index, f.kind, pids, cluster, off_machine)
    f.detail["duration_s"] = duration


def _resume(
    state: FaultState, index: int, kind: str, pids: list[int], cluster: ClusterHandle, off_machine: bool = False
) -> None:
    if off_machine:
        problem = state.provider.thaw_cluster(cluster)  # type: ignore[attr-defined]
        state.say(FaultEnded(index, kind, region=cluster.region, resumed=None if problem else 1))
        if problem is not None:
            state.say(FaultFailed(index, kind, problem))
        return
    resumed = send_signal(pids, signal.SIGCONT)
    state.say(FaultEnded(index, kind, region=cluster.region, resumed=len(resumed)))


def _ssh_drop(state: FaultState, f: Firing) -> None:
    if Capability.CUT_CONNECTION not in state.provider.capabilities:
        why = lacks("ssh_drop", Capability.CUT_CONNECTION, state.provider.name)
        state.say(FaultFailed(f.index, "ssh_drop", why))
        f.detail["failed"] = why
        return
    f.detail["cut"] = state.provider.cut_connection(f.on)  # type: ignore[attr-defined]


def _status_flap(state: FaultState, f: Firing) -> None:
    # Its next health checks fail (FaultInjector.health); the cluster itself is untouched.
    state.flaps[f.on.name] = (f.index, f.fault.count)
    f.detail["count"] = f.fault.count


HANDLERS: dict[FaultKind, Handler] = {
    FaultKind.partition: Handler(_partition),
    FaultKind.partition_region: Handler(_partition, before_mark_off_machine=True),
    FaultKind.ssh_drop: Handler(_ssh_drop),
    FaultKind.status_flap: Handler(_status_flap),
}
