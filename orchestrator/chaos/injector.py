"""The fault injector: real faults, fired when their trigger comes (``orchestrator.triggers``).

Runtime-side triggers: the training loop reaches a fault's step (or an upload, or
a restore) and posts a request on the control channel (rank, pid, step, seq),
then waits; the injector, in the controller, carries the fault out and marks it
fired. The rendezvous makes the step exact. Controller-side triggers (seconds
into an attempt, provisioning, a failover) fire from the controller's own loop.
The faults themselves are real: signals to real processes, bytes flipped in real
stores, a full filesystem, a controller killed with SIGKILL.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from orchestrator.chaos.proxy import FaultProxy, Mode, Shape
from orchestrator.runstate.events import (
    Event,
    FaultEnded,
    FaultFailed,
    FaultInjected,
    FaultRefused,
)
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.schema import ChaosRequest
from orchestrator.wire.sections import FaultSpec
from orchestrator.wire.triggers import due_after, due_during, exhausted, in_region
from providers.base import ClusterHandle, Health, HealthCheck, Provider
from recovery.store import CheckpointStore, sha256_hex


class FlappedCheck(RuntimeError):
    """A health check failed by chaos status_flap (as a provider's call can fail)."""


@dataclass(frozen=True)
class Injected:
    index: int
    kind: str
    step: int
    at: float
    detail: dict[str, object]

    def event(self) -> FaultInjected:
        """The journal's ``fault_injected`` for a fault the controller carried out."""
        return FaultInjected(self.kind, index=self.index, step=self.step, extra=dict(self.detail))


def _signal(pids: list[int], sig: int) -> list[int]:
    done = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            done.append(pid)
        except ProcessLookupError:
            pass
    return done


def _sigkill(pids: list[int]) -> list[int]:
    return _signal(pids, signal.SIGKILL)


def flip_byte(store: CheckpointStore, run_id: str, step: int, name: str = "model.pt") -> None:
    """Flip a byte of a checkpoint's file, unless it is already corrupt: idempotent, so
    a fault fired again (by a controller that died before marking it fired) never
    flips it back."""
    path = f"{store.step_path(run_id, step)}/{name}"
    data = bytearray(store.fs.cat_file(path))
    manifest = store.manifest(run_id, step)
    if manifest is not None and sha256_hex(bytes(data)) != manifest.entry(name).sha256:
        return
    data[len(data) // 2] ^= 0xFF
    store.fs.pipe_file(path, bytes(data))


def _trusted_steps(store: CheckpointStore, run_id: str) -> list[int]:
    return [s for s in store.committed_steps(run_id) if store.trusted_manifest(run_id, s)[1].ok]


def corrupt_newest(stores: list[CheckpointStore], run_id: str) -> dict[str, int]:
    """Flip a byte of the run's newest committed checkpoint (its own: signed with the
    run's key) in every store holding it.

    A store that has not received it yet never will: replication verifies its source.
    """
    held = {s.region: _trusted_steps(s, run_id) for s in stores}
    newest = max((steps[-1] for steps in held.values() if steps), default=None)
    if newest is None:
        return {}
    done = {}
    for store in stores:
        if newest in held[store.region]:
            flip_byte(store, run_id, newest)
            done[store.region] = newest
    return done


_STORAGE_SHAPES = {"storage_outage": Mode.REFUSE, "storage_hang": Mode.BLACKHOLE, "storage_slow": Mode.SLOW}
TORN_WAIT_S = 60.0
# After a partition heals, the zombie runs this long before the control plane reaches it again.
ZOMBIE_WINDOW_S = 8.0
PARTITION_S = 10.0
DISK_FULL_S = 15.0
# A scratch filesystem this small fills with one write; big enough for Linux to mount.
DISK_FULL_BYTES = 64 * 1024


def request_problem(req: ChaosRequest, generation: int | None) -> str | None:
    """Why a runtime's request must not fire on the attempt of ``generation``, or None.
    A newer generation's request (a standby's, not yet active) just waits."""
    if generation is not None and req.generation < generation:
        return f"posted by generation {req.generation}, an older attempt than generation {generation}"
    return None


def victim_problem(provider: Provider, cluster: ClusterHandle, pid: int | None) -> str | None:
    """Why ``pid`` (named by the runtime's kill_worker request) must not be signalled, or None.

    The request is the runtime's word, and a signal is real: only a process the provider
    says is the cluster's own, on this machine, may get one. A provider whose workers run
    elsewhere (SkyPilot: the pid is a remote node's) has no local pid to name."""
    if pid is None:
        return "the request names no pid"
    if not getattr(provider, "local_processes", False):
        return f"provider {getattr(provider, 'name', '?')} runs workers on remote nodes: no local pid to signal"
    if pid not in provider.processes(cluster):
        return f"pid {pid} is not a process of cluster {cluster.name}"
    return None


def kill_victim(provider: Provider, cluster: ClusterHandle, pid: int | None) -> tuple[int, str | None]:
    """SIGKILL the worker ``pid`` of a kill_worker request if it is the cluster's own:
    (processes killed, why not). On this machine the provider's process list decides;
    a provider whose workers run on remote nodes is asked to do it there (its
    ``kill_worker`` checks the pid against the cluster on the node), or refuses."""
    remote = getattr(provider, "kill_worker", None)
    if pid is not None and not getattr(provider, "local_processes", False) and callable(remote):
        problem = remote(cluster, pid)
        return (0, problem) if problem else (1, None)
    problem = victim_problem(provider, cluster, pid)
    if problem is not None:
        return 0, problem
    return len(_sigkill([pid] if pid else [])), None


def choose_node(node: int | None, seed: int, workers: list[int]) -> tuple[int | None, str | None]:
    """The worker node a kill_node or hang_node fault strikes among the cluster's
    ``workers`` (their indexes): ``node`` where the fault names one, else one drawn from
    ``seed`` (the same draw for the same nodes, in every attempt); (None, why) when
    there is no such node to strike."""
    if not workers:
        return None, "the cluster has no worker node, only its head (kill_head's): its region has nodes: 1"
    ordered = sorted(workers)
    if node is None:
        return random.Random(seed).choice(ordered), None
    if node not in ordered:
        return None, f"node {node} is not a worker node of the cluster (its worker nodes: {_spans(ordered)})"
    return node, None


def _spans(indexes: list[int]) -> str:
    return f"{indexes[0]}..{indexes[-1]}" if indexes == list(range(indexes[0], indexes[-1] + 1)) else str(indexes)


def worker_nodes(provider: Provider, cluster: ClusterHandle) -> list[int]:
    """The indexes of the cluster's worker nodes, as its provider tells them ([] where it
    cannot tell one node from another)."""
    nodes = getattr(provider, "nodes", None)
    return [check.index for check in nodes(cluster)] if callable(nodes) else []


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


def fill_scratch(path: str) -> str:
    """Mount a tiny tmpfs over ``path`` and fill it: the node's scratch disk is full.
    Raises OSError (with why) where the platform does not allow the mount."""
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_FULL_BYTES}", "orch-disk-full", path],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise OSError(f"cannot mount a tmpfs over {path}: {done.stderr.strip() or done.returncode}")
    try:
        with open(os.path.join(path, "filler"), "wb") as fh:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
    except OSError:
        pass  # ENOSPC: full, as intended
    return path


def release_scratch(path: str) -> None:
    subprocess.run(["umount", "-l", path], capture_output=True)


def _shape(kind: str, fault: FaultSpec) -> Shape:
    mode = Mode.SLOW if kind == "torn_checkpoint" else _STORAGE_SHAPES[kind]
    kbps = fault.bandwidth_kbps
    if kind == "torn_checkpoint" and kbps <= 0:
        kbps = 100.0  # slow enough that an upload is caught half way
    return Shape(
        mode=mode,
        latency_s=fault.latency_ms / 1000,
        bandwidth_bps=kbps * 1000 if kbps > 0 else None,
    )


class FaultInjector:
    def __init__(
        self,
        faults: list[dict[str, Any]] | list[FaultSpec],
        control: ControlChannel,
        provider: Provider,
        stores: Callable[[], list[CheckpointStore]],
        run_id: str,
        proxies: dict[str, FaultProxy] | None = None,
        on_event: Callable[[Event], object] | None = None,
    ) -> None:
        # The config's faults (validated there), typed as the runtime gets them.
        self.faults = [FaultSpec.from_plain(f, f"chaos.faults[{i}]") for i, f in enumerate(faults)]
        self.control = control
        self.provider = provider
        self.stores = stores
        self.run_id = run_id
        self.proxies = proxies or {}
        self.on_event = on_event or (lambda event: None)
        self._timers: list[threading.Timer] = []
        self._killed: dict[str, float] = {}  # cluster name -> when a background fault killed it
        self._unreachable: dict[str, float] = {}  # cluster name -> end of its partition
        self._timed: set[tuple[int, int]] = set()  # (fault, generation) fired by after_s
        self._mounts: dict[str, str] = {}  # cluster name -> scratch path under a full tmpfs
        self._refused: set[tuple[int, int, int]] = set()  # (fault, seq, generation) journaled once
        self._flaps: dict[str, tuple[int, int]] = {}  # cluster name -> (fault, health checks left to fail)

    def _say(self, event: Event) -> None:
        # Typed here, so a fault's line is checked where it is made.
        self.on_event(event)

    def unreachable_until(self, cluster: ClusterHandle) -> float:
        """Until when a partitioned cluster cannot be reached, so not torn down either."""
        return self._unreachable.get(cluster.name, 0.0)

    def _resume(self, index: int, kind: str, pids: list[int], cluster: ClusterHandle) -> None:
        resumed = _signal(pids, signal.SIGCONT)
        self._say(FaultEnded(index, kind, region=cluster.region, resumed=len(resumed)))

    def health(self, cluster: ClusterHandle, check: Callable[[], HealthCheck]) -> HealthCheck:
        """The provider's health check of ``cluster`` (``check``), unless a status_flap is
        failing it: then, in turn, an answer that is not UP and a check that raises (the
        two ways a real one fails), until the fault's ``count`` is spent."""
        flap = self._flaps.get(cluster.name)
        if flap is None:
            return check()
        index, left = flap
        count = self.faults[index].count
        if left > 1:
            self._flaps[cluster.name] = (index, left - 1)
        else:
            del self._flaps[cluster.name]
            self._say(FaultEnded(index, "status_flap", region=cluster.region))
        nth = count - left + 1
        if nth % 2 == 0:
            raise FlappedCheck(f"chaos status_flap: health check {nth} of {count} failed")
        return HealthCheck(Health.NOT_UP, time.time(), f"chaos status_flap: health check {nth} of {count} not UP")

    def region_killed_at(self, cluster: ClusterHandle) -> float | None:
        return self._killed.get(cluster.name)

    def release(self, cluster: ClusterHandle) -> None:
        """Before a cluster's teardown: undo what would outlive it (a mounted filesystem)."""
        path = self._mounts.pop(cluster.name, None)
        if path is not None:
            release_scratch(path)

    def close(self) -> None:
        for t in self._timers:
            t.cancel()
        for proxy in self.proxies.values():
            proxy.set(Shape())
        for path in self._mounts.values():
            release_scratch(path)
        self._mounts.clear()

    def _later(self, seconds: float, fn: Callable[..., None], *args: Any) -> None:
        timer = threading.Timer(seconds, fn, args=args)
        timer.daemon = True
        timer.start()
        self._timers.append(timer)

    # --- the triggers ----------------------------------------------------------------
    def poll(
        self,
        cluster: ClusterHandle,
        runtime_pid: int | None = None,
        generation: int | None = None,
        before_fire: Callable[[], None] | None = None,
    ) -> list[Injected]:
        """Answer the runtime's requests (a step, an upload, a restore reached) posted by
        the attempt of ``generation``: an older attempt's are refused, and journaled once.
        ``before_fire``: called once before the first fault fires."""
        if not self.faults:
            return []
        fired: list[Injected] = []
        for index, req in sorted(self.control.chaos_requests().items()):
            if index >= len(self.faults):
                continue
            if self.control.fired_count(index) >= req.seq:
                continue
            if generation is not None and req.generation > generation:
                continue  # a standby's, before its activation: its own watch answers it
            problem = request_problem(req, generation)
            if problem is not None:
                self._refuse(index, req, problem)
                continue
            if before_fire is not None and not fired:
                before_fire()
            fired.append(self._fire(index, asdict(req), cluster, runtime_pid, req.seq))
        return fired

    def _refuse(self, index: int, req: ChaosRequest, reason: str) -> None:
        key = (index, req.seq, req.generation)
        if key in self._refused:
            return
        self._refused.add(key)
        self._say(FaultRefused(index, reason, seq=req.seq, request_generation=req.generation))

    def timed(
        self, cluster: ClusterHandle, runtime_pid: int | None, generation: int, training_for_s: float | None
    ) -> list[Injected]:
        """``after_s`` faults: once per attempt, that many seconds into its training."""
        fired = []
        for index, fault in enumerate(self.faults):
            if (index, generation) in self._timed or not due_after(fault, training_for_s):
                continue
            if not in_region(fault, cluster.region):
                continue
            count = self.control.fired_count(index)
            if exhausted(fault, count):
                continue
            self._timed.add((index, generation))
            req = {"step": -1, "generation": generation, "trigger": "after_s"}
            fired.append(self._fire(index, req, cluster, runtime_pid, count + 1))
        return fired

    def at_point(self, point: str, cluster: ClusterHandle | None, region: str, step: int) -> list[Injected]:
        """Controller-side points: ``provisioning`` (a cluster just up, nothing on it
        yet, not journaled) and ``failover`` (the decision made, nothing launched)."""
        fired = []
        for index, fault in enumerate(self.faults):
            if not due_during(fault, point) or not in_region(fault, region):
                continue
            count = self.control.fired_count(index)
            if exhausted(fault, count):
                continue
            req = {"step": step, "during": point}
            fired.append(self._fire(index, req, cluster, None, count + 1))
        return fired

    # --- the faults ---------------------------------------------------------------------
    def _fire(
        self,
        index: int,
        req: dict[str, object],
        cluster: ClusterHandle | None,
        runtime_pid: int | None,
        seq: int,
    ) -> Injected:
        fault = self.faults[index]
        kind = str(fault.kind)
        step = int(req.get("step", 0))  # type: ignore[call-overload]
        now = time.time()
        detail: dict[str, object] = {"seq": seq}
        if req.get("during"):
            detail["during"] = req["during"]
        if req.get("trigger"):
            detail["trigger"] = req["trigger"]
        if kind == "corrupt_checkpoint":
            # Done before it is marked fired: the runtime reads the checkpoint the moment
            # it sees the mark (a restore), so the bytes must be bad by then. Idempotent,
            # so firing it again after a crash right here changes nothing.
            detail["corrupted"] = corrupt_newest(self.stores(), self.run_id)
        # Marked fired before it happens: a fault must never fire twice, even if we die here.
        self.control.chaos_fired(index, count=seq, kind=kind, step=step)
        if kind == "controller_crash":
            detail["pid"] = os.getpid()
            self._say(FaultInjected(kind, index=index, step=step, extra=detail))
            os.kill(os.getpid(), signal.SIGKILL)
        if kind in _STORAGE_SHAPES or kind == "torn_checkpoint":
            detail.update(self._storage(index, kind, fault, cluster))
            return Injected(index=index, kind=kind, step=step, at=now, detail=detail)
        if kind == "corrupt_checkpoint":
            return Injected(index=index, kind=kind, step=step, at=now, detail=detail)
        assert cluster is not None, f"{kind} needs a cluster"
        detail["region"] = cluster.region
        if kind == "kill_region":
            # One pass: with the head and raylet gone nothing spawns again, and the
            # controller's teardown sweeps whatever is left.
            detail["killed"] = len(set(_sigkill(self.provider.processes(cluster))))
            now = time.time()
            self._killed[cluster.name] = now
        elif kind == "kill_head":
            detail["killed"] = len(_sigkill(head_pids(self.provider, cluster)))
            now = time.time()
            self._killed[cluster.name] = now
        elif kind == "hang_region":
            # Every process stopped, sockets still open: only the heartbeat lease can tell.
            detail["stopped"] = len(_signal(self.provider.processes(cluster), signal.SIGSTOP))
            now = time.time()
        elif kind in ("partition_region", "partition"):
            # partition: the driver, which renews the lease, stops reaching the control
            # store while the workers train on and try to commit (a zombie that fencing
            # must stop). partition_region: the whole cluster frozen, then resumed.
            if kind == "partition":
                pids = [runtime_pid] if runtime_pid else []
            else:
                pids = self.provider.processes(cluster)
            detail["stopped"] = len(_signal(pids, signal.SIGSTOP))
            now = time.time()
            duration = fault.duration_s or (PARTITION_S if kind == "partition" else 5.0)
            self._unreachable[cluster.name] = now + duration + ZOMBIE_WINDOW_S
            self._later(duration, self._resume, index, kind, pids, cluster)
            detail["duration_s"] = duration
        elif kind == "preempt":
            # The notice: SIGTERM to the runtime; the machines go when the grace period ends.
            grace = fault.grace_s
            detail["notified"] = len(_signal([runtime_pid] if runtime_pid else [], signal.SIGTERM))
            detail["grace_s"] = grace
            self._later(grace, self._reclaim, index, cluster)
        elif kind == "kill_worker":
            pid = req.get("pid")
            pid = pid if isinstance(pid, int) else None
            killed, problem = kill_victim(self.provider, cluster, pid)
            if problem is not None:
                self._say(FaultRefused(index, problem, kind=kind, pid=pid))
            detail.update(rank=req.get("rank"), killed=killed)
            if problem:
                detail["refused"] = problem
        elif kind == "user_error":
            # The workload itself raises at this step (see the runtime's chaos hook).
            detail["rank"] = req.get("rank")
        elif kind == "disk_full":
            detail.update(self._disk_full(index, fault, cluster))
        elif kind == "status_flap":
            # Its next health checks fail; the cluster itself is untouched.
            self._flaps[cluster.name] = (index, fault.count)
            detail["count"] = fault.count
        elif kind == "ssh_drop":
            detail.update(self._cut(index, cluster))
        elif kind in ("kill_node", "hang_node"):
            detail.update(self._node_fault(index, kind, fault, cluster))
            now = time.time()
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        return Injected(index=index, kind=kind, step=step, at=now, detail=detail)

    def _cut(self, index: int, cluster: ClusterHandle) -> dict[str, object]:
        cut = getattr(self.provider, "cut_connection", None)
        if not callable(cut):
            why = f"provider {getattr(self.provider, 'name', '?')} has no connection to the runtime to cut"
            self._say(FaultFailed(index, "ssh_drop", why))
            return {"failed": why}
        return {"cut": cut(cluster)}

    def _node_fault(self, index: int, kind: str, fault: FaultSpec, cluster: ClusterHandle) -> dict[str, object]:
        """kill_node: SIGKILL every process of one worker node; hang_node: SIGSTOP them,
        and SIGCONT after duration_s (> 0) unless the node was replaced meanwhile."""
        node, problem = choose_node(fault.node, fault.seed, worker_nodes(self.provider, cluster))
        pids: list[int] = []
        if node is not None:
            pids = sorted(self.provider.node_processes(cluster, node))
            if not pids:
                problem = f"node {node} of cluster {cluster.name} has no process on this machine"
        if problem is not None:
            self._say(FaultRefused(index, problem, kind=kind))
            return {"node": node, "refused": problem}
        assert node is not None
        if kind == "hang_node":
            stopped = _signal(pids, signal.SIGSTOP)
            duration = fault.duration_s
            if duration > 0:
                self._later(duration, self._resume_node, index, cluster, node, stopped)
            return {"node": node, "pids": stopped, "stopped": len(stopped), "duration_s": duration or None}
        killed = _sigkill(pids)
        # One more pass: a raylet may have forked a worker between the scan and its kill.
        late = [p for p in self.provider.node_processes(cluster, node) if p not in killed]
        killed += _sigkill(late)
        return {"node": node, "pids": sorted(killed), "killed": len(killed)}

    def _resume_node(self, index: int, cluster: ClusterHandle, node: int, pids: list[int]) -> None:
        # Only what is still the node's: a replaced node's old processes were killed (its
        # pids may be another's by now), and a torn-down cluster has none.
        try:
            still = set(self.provider.node_processes(cluster, node))
        except Exception:  # the cluster or the node is gone: nothing to resume
            still = set()
        resumed = _signal([p for p in pids if p in still], signal.SIGCONT)
        self._say(FaultEnded(index, "hang_node", region=cluster.region, resumed=len(resumed)))

    def _reclaim(self, index: int, cluster: ClusterHandle) -> None:
        killed = _sigkill(self.provider.processes(cluster))
        self._say(FaultEnded(index, "preempt", region=cluster.region, reclaimed=len(killed)))

    def _disk_full(self, index: int, fault: FaultSpec, cluster: ClusterHandle) -> dict[str, object]:
        path = str(cluster.info.get("scratch_dir") or "")
        if not path:
            return {"failed": "the cluster has no scratch_dir"}
        try:
            fill_scratch(path)
        except OSError as exc:
            self._say(FaultFailed(index, "disk_full", str(exc)))
            return {"failed": str(exc)}
        self._mounts[cluster.name] = path
        duration = fault.duration_s or DISK_FULL_S
        self._later(duration, self._free_disk, index, cluster)
        return {"path": path, "bytes": DISK_FULL_BYTES, "duration_s": duration}

    def _free_disk(self, index: int, cluster: ClusterHandle) -> None:
        path = self._mounts.pop(cluster.name, None)
        if path is not None:
            release_scratch(path)
            self._say(FaultEnded(index, "disk_full", region=cluster.region))

    def _storage(self, index: int, kind: str, fault: FaultSpec, cluster: ClusterHandle | None) -> dict[str, object]:
        region = fault.region or (cluster.region if cluster else "")
        proxy = self.proxies[region]
        shape = _shape(kind, fault)
        proxy.set(shape)
        duration = fault.duration_s
        if duration > 0 and kind != "torn_checkpoint":
            self._later(duration, self._heal, index, kind, region)
        if kind == "torn_checkpoint":
            assert cluster is not None
            store = next(s for s in self.stores() if s.region == region)
            threading.Thread(
                target=self._tear,
                args=(index, store, proxy, cluster),
                daemon=True,
                name="torn-checkpoint",
            ).start()
        return {"region": region, "mode": str(shape.mode), "duration_s": duration or None}

    def _heal(self, index: int, kind: str, region: str) -> None:
        self.proxies[region].set(Shape())
        self._say(FaultEnded(index, kind, region=region))

    def _tear(self, index: int, store: CheckpointStore, proxy: FaultProxy, cluster: ClusterHandle) -> None:
        """Wait for an upload caught half way (files, no manifest), then kill the region."""
        deadline = time.time() + TORN_WAIT_S
        committed = set(store.committed_steps(self.run_id))
        torn = None
        while time.time() < deadline and torn is None:
            try:
                steps = store.all_steps(self.run_id)
            except Exception:  # the store is slowed, not down; try again
                steps = {}
            newest = max(committed, default=0)
            for step, has_manifest in steps.items():
                if not has_manifest and step > newest and _has_files(store, self.run_id, step):
                    torn = step
            time.sleep(0.05)
        if torn is None:
            self._say(FaultFailed(index, "torn_checkpoint", "no upload seen"))
            proxy.set(Shape())
            return
        killed = _sigkill(self.provider.processes(cluster))
        self._killed[cluster.name] = time.time()
        proxy.set(Shape())
        detail = {"torn_step": torn, "killed": len(killed), "region": cluster.region, "stage": "kill"}
        self._say(FaultInjected("torn_checkpoint", index=index, extra=detail))


def _has_files(store: CheckpointStore, run_id: str, step: int) -> bool:
    try:
        return bool(store.fs.ls(store.step_path(run_id, step), detail=False))
    except Exception:
        return False
