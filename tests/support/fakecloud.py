"""A provider whose clusters and runtimes are scripts, for driving the controller's loop
(``Controller.step()``) without Ray: each launch in a region takes the next entry of
that region's script, a ``ProvisionErrorKind`` (the launch fails so) or a ``Script``
(what the runtime then does, step by step, one batch of steps per poll of the watch).
The controller holds a runtime through a ``FakeConnection`` (what ssh is to a cloud's
head): ``cut_connection`` (chaos ssh_drop) cuts it and the runtime trains on.

The scripted runtime is honest where the controller's decisions depend on it: it
restores the newest checkpoint in its region's store that verifies and is on the
lineage it was started with, commits signed checkpoints with fencing (an older
generation's commit after a failover is refused), and reports through the real
control channel (heartbeat, progress, events, final, exit code).

A region of ``nodes`` > 1 has worker nodes 1 .. nodes-1, each a real process (a
``sleep``), so that chaos ``kill_node`` and ``hang_node`` signal something real and
``nodes()`` reports what they did: GONE once it is killed, NOT_UP while it is
stopped. ``replace_node`` starts a new one, or fails as ``node_replacements`` says.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import ClassVar

import psutil

from orchestrator.wire import logfiles, runkey
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.logfiles import KeptLogs
from orchestrator.wire.spec import RuntimeSpec
from providers.base import Capability, ClusterHandle, NodeCheck, Plan, ProvisionError, ProvisionErrorKind, RegionSpec
from recovery.detection import EXIT_OK, EXIT_PREEMPTED, EXIT_USER_ERROR, EXIT_WORKERS_EXHAUSTED, Health, HealthCheck
from recovery.fencing import FencedError, Lineage
from recovery.keys import AttemptKeys
from recovery.store import CheckpointStore

# Heartbeats for a run over this cloud. Its runtime beats only when the controller polls
# it, so a controller slowed between its poll and its read (a loaded machine, the unit tier
# at niceness 10 beside the Ray tiers, an fsync queued behind their writes) ages the beat
# as a hung runtime's would: the timeout stands far above such a stall, and the tests of a
# hang pay it once.
HEARTBEAT_TIMEOUT_S = 2.0
HEARTBEATS = ("recovery.heartbeat_interval_s=0.05", f"recovery.heartbeat_timeout_s={HEARTBEAT_TIMEOUT_S}")


@dataclass(frozen=True)
class Script:
    """Train to ``until`` (None: the job's steps), then ``then``: ``finish``,
    ``cluster_lost`` (the region goes dark), ``runtime_lost`` (the driver dies, the
    cluster stays), ``hang`` (heartbeats stop), ``unreachable`` (heartbeats stop and
    the provider can no longer tell: its health checks answer NOT_UP, never GONE),
    ``user_error`` (no step known), ``user_error_in_step`` (in step ``until`` + 1),
    ``preempted``, ``forged_finish`` (exit 0 with a forged final.json)
    (commits, then exits so), ``workers_exhausted``, ``interrupt`` (Ctrl-C reaches the
    controller, as SIGINT raises KeyboardInterrupt wherever its main thread is)."""

    until: int | None = None
    then: str = "finish"


@dataclass
class FakeRuntime:
    spec: RuntimeSpec
    script: Script
    provider: FakeCloud
    cluster: ClusterHandle
    key: AttemptKeys
    pid: int
    step: int = 0
    started: bool = False
    code: int | None = None
    hung: bool = False
    commits_refused: int = 0

    @property
    def control(self) -> ControlChannel:
        return ControlChannel(self.spec.control_url, self.spec.control_options, keys=self.key)

    @property
    def store(self) -> CheckpointStore:
        return CheckpointStore(self.spec.store_url, region=self.spec.region, key=self.key)

    def poll(self) -> int | None:
        if self.code is not None or self.hung:
            return self.code
        if self.cluster.name in self.provider.dead:
            self.code = -9
            return self.code
        gen, control = self.spec.generation, self.control
        if self.spec.standby and not control.is_active(gen):
            control.heartbeat(gen)
            return None
        if not self.started:
            self._start(control)
            return None
        total = self.spec.job.steps
        until = total if self.script.until is None else self.script.until
        if self.step < until:
            self.step = min(until, self.step + self.provider.steps_per_poll)
            if self.step % self.provider.every == 0 or self.step == until:
                if self._commit(self.step):
                    # As the built-in loop reports a commit (the step time and where a checkpoint is).
                    control.event(gen, "checkpoint_committed", step=self.step, region=self.spec.region, bytes=16)
            control.heartbeat(gen)
            control.progress(gen, step=self.step, total=total, loss=1.0 / self.step)
            # The loss series: the generation in its integer part, so a test tells whose point was kept.
            control.event(gen, "losses", points=[[self.step, gen + 1.0 / self.step]])
            return None
        return self._end(control, total)

    def _start(self, control: ControlChannel) -> None:
        lineage = self.spec.fencing_lineage()
        if self.spec.standby:
            activation = control.read_activation(self.spec.generation) or {}
            if activation.get("lineage") is not None:
                lineage = Lineage.from_plain(activation["lineage"])
        newest = self.store.latest_verified(self.spec.run_id, lineage=lineage)
        self.step = 0 if newest is None else newest.step
        self.started = True
        if self.spec.log_dir:
            # What a worker's output is to a real cluster: rank 0's line in its log folder.
            with open(os.path.join(self.spec.log_dir, logfiles.rank_file(0)), "a", encoding="utf-8") as fh:
                fh.write(f"fake rank 0: attempt {self.spec.generation} restored step {self.step}\n")
        control.heartbeat(self.spec.generation)
        control.event(self.spec.generation, "train_started", restored_step=self.step, pid=self.pid)

    def _commit(self, step: int) -> bool:
        store = self.store
        entry = store.put(self.spec.run_id, step, "model.pt", f"weights at {step}".encode())
        # As the built-in loop does: the last step's manifest names the weights' digest.
        extra = {"weights_sha256": entry.sha256} if step == self.spec.job.steps else {}
        try:
            store.commit(self.spec.run_id, step, self.spec.generation, [entry], extra=extra, fenced=True)
        except FencedError:
            self.commits_refused += 1
            return False
        return True

    def _end(self, control: ControlChannel, total: int) -> int | None:
        gen, then = self.spec.generation, self.script.then
        if then == "finish":
            control.final(gen, final_step=total, metrics={"loss": 1.0 / total})
            self.code = EXIT_OK
        elif then == "forged_finish":
            # What a cluster (or anyone who can write its control folder) could claim.
            control.final(
                gen,
                final_step=10**12,
                metrics={"loss": 0.0},
                weights_sha256="f" * 64,
                final_checkpoint="file:///etc/passwd",
            )
            self.code = EXIT_OK
        elif then == "cluster_lost":
            self.provider.dead.add(self.cluster.name)
            self.code = -9
        elif then == "runtime_lost":
            self.code = -9
        elif then == "hang":
            self.hung = True
            return None
        elif then == "unreachable":
            self.provider.unreachable.add(self.cluster.name)
            self.hung = True
            return None
        elif then == "user_error":
            control.event(gen, "user_error", error="ValueError: boom", traceback="Traceback: boom", rank=0)
            self.code = EXIT_USER_ERROR
        elif then == "user_error_in_step":
            # The built-in loop's report: the step it raised in, and the user's file and line.
            control.event(
                gen,
                "user_error",
                error="ValueError: boom",
                traceback="Traceback: boom",
                rank=0,
                step=self.step + 1,
                site="/proj/model.py:46",
            )
            self.code = EXIT_USER_ERROR
        elif then == "preempted":
            control.event(gen, "preempted", step=self.step)
            self.code = EXIT_PREEMPTED
        elif then == "workers_exhausted":
            self.code = EXIT_WORKERS_EXHAUSTED
        elif then == "interrupt":
            raise KeyboardInterrupt
        else:
            raise ValueError(f"no such script ending: {then}")
        control.exited(gen, self.code)
        return self.code


# What a cut connection answers: ssh's status when it loses its session.
CONNECTION_LOST = 255


@dataclass
class FakeConnection:
    """The controller's hold on a scripted runtime: polling it runs the script."""

    runtime: FakeRuntime
    cut: bool = False

    @property
    def pid(self) -> int:
        return self.runtime.pid

    def poll(self) -> int | None:
        return CONNECTION_LOST if self.cut else self.runtime.poll()


@dataclass
class FakeCloud:
    """The Provider protocol over scripts: ``scripts[region]`` is consumed launch by launch."""

    # Its worker nodes are real processes here, told apart and replaced; its runtimes are
    # held through a connection that can be cut. (The runtimes' pids are made up: a fault
    # that signals the whole cluster signals its nodes, and no process for the runtime.)
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.LOCAL_PROCESSES, Capability.NODES, Capability.REPLACE_NODE, Capability.CUT_CONNECTION}
    )
    scripts: dict[str, list[Script | ProvisionErrorKind]]
    name: str = "fake"
    steps_per_poll: int = 10
    every: int = 20
    dead: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    connections: list[FakeConnection] = field(default_factory=list)
    clusters: dict[str, ClusterHandle] = field(default_factory=dict)
    torn_down: list[str] = field(default_factory=list)
    launched: list[str] = field(default_factory=list)
    runtimes: list[FakeRuntime] = field(default_factory=list)
    # A folder for each cluster's log folder (its ranks' files); None: clusters keep no logs.
    log_root: str | None = None
    # Per cluster, its worker nodes' stand-in processes by index.
    node_procs: dict[str, dict[int, subprocess.Popen[bytes]]] = field(default_factory=dict)
    # What each replace_node call does, in turn: None (a new node, up) or a kind it
    # fails with; once used up, every replacement succeeds.
    node_replacements: list[ProvisionErrorKind | None] = field(default_factory=list)
    replaced: list[tuple[str, int]] = field(default_factory=list)  # (cluster, index), per success
    dropped: list[tuple[str, int]] = field(default_factory=list)  # (cluster, index): lost, not replaced
    _pending: dict[str, Script] = field(default_factory=dict)

    def precheck(self, regions: list[str]) -> None:
        """Every scripted region can be launched in (a script's failure comes at launch)."""

    def plan(self, cfg: object, run_id: str, out_dir: str) -> Plan:
        return Plan(tuple(f"{i} {region}" for i, region in enumerate(self.scripts, start=1)))

    def launch(
        self, region: RegionSpec, cluster_name: str, timeout_s: float, env: dict[str, str] | None = None
    ) -> ClusterHandle:
        script = self.scripts.get(region.name) or [Script()]
        entry = script.pop(0) if len(script) > 1 else script[0]
        self.launched.append(cluster_name)
        if isinstance(entry, ProvisionErrorKind):
            raise ProvisionError(entry, region.name, f"scripted {entry}")
        handle = ClusterHandle(cluster_name, region.name, self.name, f"fake://{cluster_name}")
        if self.log_root is not None:
            handle.info["log_dir"] = os.path.join(self.log_root, cluster_name)
            os.makedirs(handle.info["log_dir"])
        self.clusters[cluster_name] = handle
        self._pending[cluster_name] = entry
        self.node_procs[cluster_name] = {i: _node_process() for i in range(1, region.nodes)}
        return handle

    def health(self, cluster: ClusterHandle) -> HealthCheck:
        if cluster.name not in self.clusters or cluster.name in self.dead:
            return HealthCheck(Health.GONE, time.time(), "no such cluster")
        if cluster.name in self.unreachable:
            return HealthCheck(Health.NOT_UP, time.time(), "does not answer")
        return HealthCheck(Health.UP, time.time())

    def reattach(self, cluster: ClusterHandle, proc: object) -> FakeConnection | None:
        if not isinstance(proc, FakeConnection) or proc.runtime.code is not None:
            return None
        return self._connect(proc.runtime)

    def cut_connection(self, cluster: ClusterHandle) -> int:
        live = [c for c in self.connections if c.runtime.cluster.name == cluster.name and not c.cut]
        for conn in live:
            conn.cut = True
        return len(live)

    def _connect(self, runtime: FakeRuntime) -> FakeConnection:
        conn = FakeConnection(runtime)
        self.connections.append(conn)
        return conn

    def start_runtime(
        self, cluster: ClusterHandle, argv: list[str], env: dict[str, str], log_path: str
    ) -> FakeConnection:
        spec = RuntimeSpec.load(argv[-1])
        rt = FakeRuntime(
            spec,
            self._pending.pop(cluster.name),
            self,
            cluster,
            runkey.parse(env[runkey.ENV]),
            pid=os.getpid() + 100000 + len(self.runtimes),
        )
        self.runtimes.append(rt)
        return self._connect(rt)

    def processes(self, cluster: ClusterHandle) -> list[int]:
        nodes = [p.pid for p in self.node_procs.get(cluster.name, {}).values() if p.poll() is None]
        return [rt.pid for rt in self.runtimes if rt.cluster.name == cluster.name] + nodes

    def nodes(self, cluster: ClusterHandle) -> list[NodeCheck]:
        out = []
        for index, proc in sorted(self.node_procs.get(cluster.name, {}).items()):
            if proc.poll() is not None or cluster.name in self.dead:
                out.append(NodeCheck(index, Health.GONE, "its process exited"))
            elif _stopped(proc.pid):
                out.append(NodeCheck(index, Health.NOT_UP, "its process is stopped"))
            else:
                out.append(NodeCheck(index, Health.UP))
        return out

    def node_processes(self, cluster: ClusterHandle, index: int) -> list[int]:
        proc = self.node_procs.get(cluster.name, {}).get(index)
        return [proc.pid] if proc is not None and proc.poll() is None else []

    def drop_node(self, cluster: ClusterHandle, index: int) -> None:
        proc = self.node_procs.get(cluster.name, {}).get(index)
        if proc is not None:
            _end(proc)
        self.dropped.append((cluster.name, index))

    def replace_node(self, cluster: ClusterHandle, index: int, timeout_s: float) -> None:
        procs = self.node_procs.get(cluster.name, {})
        if index not in procs:
            raise ValueError(f"cluster {cluster.name} has no worker node {index}")
        _end(procs[index])
        outcome = self.node_replacements.pop(0) if self.node_replacements else None
        if outcome is not None:
            raise ProvisionError(outcome, cluster.region, f"scripted {outcome} replacing node {index}")
        procs[index] = _node_process()
        self.replaced.append((cluster.name, index))

    def keep_logs(self, cluster: ClusterHandle, dest_dir: str) -> KeptLogs:
        """As a cloud's: a cluster that was lost took its nodes' disks, and their logs, with it."""
        if cluster.name in self.dead:
            return KeptLogs(error=f"cluster {cluster.name} was lost; its nodes' logs went with it")
        log_dir = cluster.info.get("log_dir")
        return logfiles.keep(log_dir, dest_dir) if log_dir else KeptLogs()

    def teardown(self, cluster: ClusterHandle) -> None:
        for proc in self.node_procs.pop(cluster.name, {}).values():
            _end(proc)
        if self.clusters.pop(cluster.name, None) is not None:
            self.torn_down.append(cluster.name)

    def find(self, cluster_name: str) -> ClusterHandle | None:
        return self.clusters.get(cluster_name)


def _node_process() -> subprocess.Popen[bytes]:
    # Bounded: a test that dies before its teardown leaves nothing for long.
    return subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, start_new_session=True)


def _stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
