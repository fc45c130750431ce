"""Faults that strike processes: a region's cluster killed or hung, its head killed, a
preemption notice, one worker killed, one worker node killed or hung, the workload made
to raise, the controller itself killed. Signals to real processes, the provider's own."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time

import psutil

from orchestrator.chaos.firing import FaultState, Firing, Handler, send_signal, sigkill, struck_off_machine
from orchestrator.runstate.events import FaultEnded, FaultInjected, FaultRefused
from orchestrator.wire.faults import FaultKind, NodeRole
from providers.base import Capability, ClusterHandle, Provider, lacks


def victim_problem(provider: Provider, cluster: ClusterHandle, pid: int | None) -> str | None:
    """Why ``pid`` (named by the runtime's kill_worker request) must not be signalled, or None.

    The request is the runtime's word, and a signal is real: only a process the provider
    says is the cluster's own, on this machine, may get one. A provider whose workers run
    elsewhere (SkyPilot: the pid is a remote node's) has no local pid to name."""
    if pid is None:
        return "the request names no pid"
    if Capability.LOCAL_PROCESSES not in provider.capabilities:
        return lacks("signalling a worker's pid on this machine", Capability.LOCAL_PROCESSES, provider.name)
    if pid not in provider.processes(cluster):
        return f"pid {pid} is not a process of cluster {cluster.name}"
    return None


def kill_victim(provider: Provider, cluster: ClusterHandle, pid: int | None) -> tuple[int, str | None]:
    """SIGKILL the worker ``pid`` of a kill_worker request if it is the cluster's own:
    (processes killed, why not). On this machine the provider's process list decides;
    a provider whose workers run on remote nodes is asked to do it there (its
    ``kill_worker`` checks the pid against the cluster on the node), or refuses."""
    can = provider.capabilities
    if pid is not None and Capability.LOCAL_PROCESSES not in can and Capability.KILL_WORKER in can:
        problem = provider.kill_worker(cluster, pid)  # type: ignore[attr-defined]
        return (0, problem) if problem else (1, None)
    problem = victim_problem(provider, cluster, pid)
    if problem is not None:
        return 0, problem
    return len(sigkill([pid] if pid else [])), None


def choose_node(
    node: int | None,
    seed: int,
    workers: list[int],
    training: list[int] | None = None,
    role: NodeRole = NodeRole.training,
) -> tuple[int | None, str | None]:
    """The worker node a kill_node or hang_node fault strikes among the cluster's
    ``workers`` (their indexes): ``node`` where the fault names one, else one drawn from
    ``seed`` (the same draw for the same nodes, in every attempt) among those of ``role``:
    ``training`` (running a worker of the group: a node that holds only idle capacity is
    a lesser fault; among all where none is known), or the ``idle`` ones. ``training``:
    the nodes the group's ranks run on (the head's 0 among them, perhaps; [] not known);
    (None, why) when there is no such node to strike."""
    if not workers:
        return None, "the cluster has no worker node, only its head (kill_head's): its region has nodes: 1"
    ordered = sorted(workers)
    if node is not None:
        if node not in ordered:
            return None, f"node {node} is not a worker node of the cluster (its worker nodes: {_spans(ordered)})"
        return node, None
    busy = sorted(set(ordered) & set(training or ()))
    if role == NodeRole.idle:
        if not training:
            return None, "which nodes run the group's workers is not known (no train_started with worker_nodes yet)"
        idle = [i for i in ordered if i not in busy]
        if not idle:
            why = f"every worker node ({_spans(ordered)}) runs a worker of the group: no idle node to strike"
            if 0 not in training:
                return None, f"{why}; the idle one is the head (0), which only kill_head strikes"
            return None, f"{why} (give the region more nodes than its workers need: cloud.regions.<name>.nodes)"
        return random.Random(seed).choice(idle), None
    return random.Random(seed).choice(busy or ordered), None


def _spans(indexes: list[int]) -> str:
    return f"{indexes[0]}..{indexes[-1]}" if indexes == list(range(indexes[0], indexes[-1] + 1)) else str(indexes)


def worker_nodes(provider: Provider, cluster: ClusterHandle) -> list[int]:
    """The indexes of the cluster's worker nodes, as its provider tells them ([] where it
    cannot tell one node from another)."""
    return [check.index for check in provider.nodes(cluster)] if Capability.NODES in provider.capabilities else []


def head_pids(provider: Provider, cluster: ClusterHandle) -> list[int]:
    """The head of a cluster: its GCS and the process that started it (on the local
    provider's one-node clusters, the node's raylet and workers stay up, headless)."""
    head = int(cluster.info.get("head_pid", -1))
    out = []
    for pid in provider.processes(cluster):
        try:
            if pid == head or psutil.Process(pid).name() == "gcs_server":
                out.append(pid)
        except psutil.Error:
            continue
    return out


def _kill_region(state: FaultState, f: Firing) -> None:
    graceful = f.fault.graceful
    if graceful:
        f.detail["graceful"] = True
    if Capability.LOCAL_PROCESSES not in state.provider.capabilities:
        # Off this machine (SkyPilot on Slurm): the provider kills it where it runs.
        killed = state.provider.kill_cluster(f.on, graceful=graceful)  # type: ignore[attr-defined]
        if struck_off_machine(state, f, killed, "cancelled"):
            f.at = state.killed[f.on.name] = time.time()
        return
    if graceful:
        # What a machine's shutdown does: every process told, then killed after the grace.
        f.detail["terminated"] = len(set(send_signal(state.provider.processes(f.on), signal.SIGTERM)))
        f.detail["grace_s"] = f.fault.grace_s
        f.at = state.killed[f.on.name] = time.time()
        state.later(f.fault.grace_s, _reclaim, state, f.index, f.on, str(f.kind))
        return
    # One pass: with the head and raylet gone nothing spawns again, and the
    # controller's teardown sweeps whatever is left.
    f.detail["killed"] = len(set(sigkill(state.provider.processes(f.on))))
    f.at = state.killed[f.on.name] = time.time()


def _kill_head(state: FaultState, f: Firing) -> None:
    f.detail["killed"] = len(sigkill(head_pids(state.provider, f.on)))
    f.at = state.killed[f.on.name] = time.time()


def _hang_region(state: FaultState, f: Firing) -> None:
    # Every process stopped, sockets still open: only the heartbeat lease can tell.
    if Capability.LOCAL_PROCESSES not in state.provider.capabilities:
        # Off this machine (SkyPilot on Slurm): frozen where it runs, by its provider.
        if not struck_off_machine(state, f, state.provider.freeze_cluster(f.on), "frozen"):  # type: ignore[attr-defined]
            return
    else:
        f.detail["stopped"] = len(send_signal(state.provider.processes(f.on), signal.SIGSTOP))
    f.at = time.time()


def _preempt(state: FaultState, f: Firing) -> None:
    # The notice: SIGTERM to the runtime; the machines go when the grace period ends.
    grace = f.fault.grace_s
    f.detail["notified"] = len(send_signal([f.runtime_pid] if f.runtime_pid else [], signal.SIGTERM))
    f.detail["grace_s"] = grace
    state.later(grace, _reclaim, state, f.index, f.on)


def _reclaim(state: FaultState, index: int, cluster: ClusterHandle, kind: str = "preempt") -> None:
    killed = sigkill(state.provider.processes(cluster))
    state.say(FaultEnded(index, kind, region=cluster.region, reclaimed=len(killed)))


def _kill_worker(state: FaultState, f: Firing) -> None:
    pid = f.req.get("pid")
    pid = pid if isinstance(pid, int) else None
    killed, problem = kill_victim(state.provider, f.on, pid)
    if problem is not None:
        state.say(FaultRefused(f.index, problem, kind=f.kind, pid=pid))
    f.detail.update(rank=f.req.get("rank"), killed=killed)
    if problem:
        f.detail["refused"] = problem


def _user_error(state: FaultState, f: Firing) -> None:
    # The workload itself raises at this step, or the workers flip a byte of the state
    # they hold (corrupt_peer_state): the runtime's chaos hook does it.
    f.detail["rank"] = f.req.get("rank")


def _controller_crash(state: FaultState, f: Firing) -> None:
    f.detail["pid"] = os.getpid()
    state.say(FaultInjected(f.kind, index=f.index, step=f.step, extra=f.detail))
    os.kill(os.getpid(), signal.SIGKILL)


def _controller_host_loss(state: FaultState, f: Firing) -> None:
    # The machine is gone with everything the run kept on it: its folder (the rest of the
    # home, other runs', is spared: a drill must not destroy them). Said first, so the
    # line reaches the control store's mirror before the folder goes.
    f.detail.update(pid=os.getpid(), deleted=state.run_dir)
    state.say(FaultInjected(f.kind, index=f.index, step=f.step, extra=f.detail))
    if state.run_dir:
        shutil.rmtree(state.run_dir, ignore_errors=True)
    os.kill(os.getpid(), signal.SIGKILL)


def _controller_freeze(state: FaultState, f: Firing) -> None:
    # A process cannot wake itself: a helper in its own session stops this one, and
    # continues it after duration_s, whatever became of the run meanwhile.
    pid, duration = os.getpid(), f.fault.duration_s
    f.detail.update(pid=pid, duration_s=duration)
    state.say(FaultInjected(f.kind, index=f.index, step=f.step, extra=f.detail))
    f.said = True
    subprocess.Popen(
        ["/bin/sh", "-c", 'kill -STOP "$0"; sleep "$1"; kill -CONT "$0"', str(pid), f"{duration:g}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(duration + 1)  # stopped in here; the attempt's watch goes on once continued


def _node_fault(state: FaultState, f: Firing) -> None:
    """kill_node: SIGKILL every process of one worker node; hang_node: SIGSTOP them,
    and SIGCONT after duration_s (> 0) unless the node was replaced meanwhile."""
    f.detail.update(_strike_node(state, f))
    f.at = time.time()


def _strike_node(state: FaultState, f: Firing) -> dict[str, object]:
    provider, cluster = state.provider, f.on
    workers = worker_nodes(provider, cluster)
    node, problem = choose_node(f.fault.node, f.fault.seed, workers, state.worker_nodes, NodeRole(f.fault.node_role))
    pids: list[int] = []
    if node is not None:
        pids = sorted(provider.node_processes(cluster, node))
        if not pids:
            problem = f"node {node} of cluster {cluster.name} has no process on this machine"
    if problem is not None:
        state.say(FaultRefused(f.index, problem, kind=f.kind))
        return {"node": node, "refused": problem}
    assert node is not None
    if f.kind == "hang_node":
        stopped = send_signal(pids, signal.SIGSTOP)
        duration = f.fault.duration_s
        if duration > 0:
            state.later(duration, _resume_node, state, f.index, cluster, node, stopped)
        return {"node": node, "pids": stopped, "stopped": len(stopped), "duration_s": duration or None}
    killed = sigkill(pids)
    # One more pass: a raylet may have forked a worker between the scan and its kill.
    late = [p for p in provider.node_processes(cluster, node) if p not in killed]
    killed += sigkill(late)
    return {"node": node, "pids": sorted(killed), "killed": len(killed)}


def _resume_node(state: FaultState, index: int, cluster: ClusterHandle, node: int, pids: list[int]) -> None:
    # Only what is still the node's: a replaced node's old processes were killed (its
    # pids may be another's by now), and a torn-down cluster has none.
    try:
        still = set(state.provider.node_processes(cluster, node))
    except Exception:  # the cluster or the node is gone: nothing to resume
        still = set()
    resumed = send_signal([p for p in pids if p in still], signal.SIGCONT)
    state.say(FaultEnded(index, "hang_node", region=cluster.region, resumed=len(resumed)))


HANDLERS: dict[FaultKind, Handler] = {
    FaultKind.kill_region: Handler(_kill_region, before_mark_off_machine=True),
    FaultKind.kill_head: Handler(_kill_head),
    FaultKind.hang_region: Handler(_hang_region, before_mark_off_machine=True),
    FaultKind.preempt: Handler(_preempt),
    # The victim waits on the mark, and goes on once it is there: marked first, it could
    # train on into the next step before the signal lands, and the survivors with it.
    FaultKind.kill_worker: Handler(_kill_worker, before_mark=True),
    FaultKind.user_error: Handler(_user_error),
    FaultKind.corrupt_peer_state: Handler(_user_error),
    FaultKind.controller_crash: Handler(_controller_crash, needs_cluster=False),
    FaultKind.controller_host_loss: Handler(_controller_host_loss, needs_cluster=False),
    FaultKind.controller_freeze: Handler(_controller_freeze, needs_cluster=False),
    FaultKind.kill_node: Handler(_node_fault),
    FaultKind.hang_node: Handler(_node_fault),
}
