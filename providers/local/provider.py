"""The local provider: each region is a real Ray cluster on this machine.

A cluster is ``ray start --head --block`` in a session of its own, with its own
ports and temp dir, everything bound to 127.0.0.1 (torch's collectives too:
``providers/local/loopback.py``), and as many worker nodes as the
region has beyond the head (``providers/local/nodes.py``). Every process it spawns
(and the runtime driver) carries the cluster's marker in ``ORCHESTRATOR_CLUSTER``
(its name and a token of its launch: ``marker_of``), which is how teardown and fault
injection find them all.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

import psutil

from orchestrator.wire import logfiles
from orchestrator.wire.logfiles import KeptLogs
from providers.base import (
    Capability,
    ClusterHandle,
    NodeCheck,
    Plan,
    ProviderUnavailable,
    ProvisionError,
    ProvisionErrorKind,
    RegionSpec,
    RuntimeProcess,
)
from providers.local.loopback import collectives_env, loopback_interface
from providers.local.nodes import (
    NODE_HEALTH_ENV,
    NODE_PORT_FLAGS,
    REPLACEMENT_ENV,
    find_raylet,
    node_check,
    node_label,
    worker_argv,
)
from providers.procs import MARKER, NODE_MARKER, kill_all, kill_until_gone, marked, node_marked
from recovery.detection import Health, HealthCheck
from recovery.fsio import write_private

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, RegionConfig, TrainerConfig

READY_LINE = "Ray runtime started"
# What a runtime driver imports first (providers/warm.py): imported while the cluster starts.
PRELOAD = ("ray.train.torch",)
TOKEN_NAME = "auth_token"
OBJECT_STORE_BYTES = 256 * 1024 * 1024
# What a cut connection answers: ssh's status when it loses its session.
CONNECTION_LOST = 255


def validate_region(name: str, region: RegionConfig, trainer: TrainerConfig | None) -> None:
    """A local region offers the GPUs of this machine it is given (num_gpus), no more;
    ``trainer``: the run's, for a region the run may use (None: one it will not)."""
    from orchestrator.errors import ConfigError

    if trainer is None:
        return
    gpus = trainer.workers * trainer.gpus_per_worker
    if gpus > region.num_gpus:
        raise ConfigError(
            "trainer.gpus_per_worker",
            f"{trainer.workers} workers x {trainer.gpus_per_worker} GPUs need {gpus:g} GPUs but "
            f"region {name!r} offers {region.num_gpus}; set cloud.regions.{name}.num_gpus "
            "(this machine's GPUs) or lower trainer.gpus_per_worker",
        )


# Loopback only (Ray otherwise binds and advertises the external address), and token
# auth on: another user of this machine reaches 127.0.0.1 too, and an open GCS runs
# whatever code it is sent. Each cluster has its own token (TOKEN_NAME in its private
# temp dir), which its processes and the runtime driver get through RAY_AUTH_TOKEN_PATH.
BASE_ENV = {
    # 0: Ray takes 127.0.0.1 for this machine's address wherever none is given (a worker
    # node joins all the same: providers/raystart.py --join-on-loopback).
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "token",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    # Each raylet starts one idle worker process per CPU as it comes up, while the node
    # waits for its driver: Ray Train's actors take them (orchestrator/runtime/trainer.py,
    # cluster_runtime_env) instead of starting interpreters once asked for. Not again when
    # the driver connects: those would start beside the worker group's and slow it.
    # (Importing torch in them too, RAY_preload_python_modules, was slower here: that
    # work then competes with the driver's start for the same cores.)
    "RAY_prestart_worker_first_driver": "0",
    "RAY_enable_worker_prestart": "1",
}


# A cluster's daemons get their ports from us, checked free, then bound by Ray a moment
# later. Drawn from the kernel's ephemeral range (what bind(0) gives), such a port can be
# taken in that moment by any process binding port 0 (every Ray worker does), or be
# handed out twice, and a raylet then asked its runtime-env agent for an actor's
# environment and got another process's metrics server. So: below the ephemeral range
# and above Ray's worker ports (10002-19999), never one this process handed out before.
# Two controllers on one machine each hand out their own ports, and could hand out the
# same one in that moment: ORCHESTRATOR_LOCAL_PORTS=LOW-HIGH gives each its own range.
PORT_LOW = 20000
PORTS_ENV = "ORCHESTRATOR_LOCAL_PORTS"
_handed: set[int] = set()


def port_range(value: str | None, ephemeral: int) -> tuple[int, int]:
    """The ports (low, high) local clusters take: ``value`` (ORCHESTRATOR_LOCAL_PORTS,
    ``LOW-HIGH``) or PORT_LOW up to the kernel's ``ephemeral`` range. ValueError, naming
    the variable and the form, for a malformed or too narrow one."""
    if not value:
        return PORT_LOW, ephemeral - 1
    try:
        low, high = (int(part) for part in value.split("-"))
    except ValueError:
        low = high = -1
    if not (1024 <= low and low + 100 <= high <= 65535):
        raise ValueError(
            f"{PORTS_ENV}={value!r}: expected LOW-HIGH, two ports from 1024 to 65535 at least 100 apart, "
            f"best below {ephemeral} where the kernel hands out its own (e.g. {PORT_LOW}-{PORT_LOW + 6000})"
        )
    return low, high


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default: 32768)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port on 127.0.0.1 free now, outside the ephemeral range where it can be, and
    never the same twice in this process."""
    low, high = port_range(os.environ.get(PORTS_ENV), ephemeral_low())
    rng = secrets.SystemRandom()
    for _ in range(200 if high - low >= 100 else 0):
        port = rng.randint(low, high)
        if port in _handed:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed.add(port)
        return port
    while True:  # a machine whose ephemeral range leaves no room: the kernel's choice
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed:
            _handed.add(port)
            return port


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class LocalRuntime:
    """The runtime's process as the controller holds it. On this machine the handle is
    the connection (what the ssh session is to a cloud's head): chaos ``ssh_drop`` cuts
    it, and it answers as a lost ssh session does while the process trains on."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.cut = False

    def poll(self) -> int | None:
        return CONNECTION_LOST if self.cut else self.proc.poll()


class LocalProvider:
    name = "local"
    # Its clusters' processes are this machine's: a pid the runtime names can be checked
    # against processes() and signalled (chaos kill_worker); each worker node is a `ray
    # start` of its own, told apart, replaced; the runtime's handle is the connection.
    capabilities = frozenset(
        {
            Capability.LOCAL_PROCESSES,
            Capability.NODES,
            Capability.REPLACE_NODE,
            Capability.CUT_CONNECTION,
            # A cluster's token is a file beside it and its processes are named in its handle.
            Capability.SHARED_CLUSTERS,
        }
    )

    def __init__(self, state_dir: str | None = None, code_dir: str = "", dashboard: bool = False) -> None:
        self._heads: dict[str, subprocess.Popen[bytes]] = {}
        # Per cluster, its worker nodes' ``ray start`` processes this provider started, by index.
        self._nodes: dict[str, dict[int, subprocess.Popen[bytes]]] = {}
        # Clusters torn down: a replacement still starting (the controller's thread) must
        # not outlive its cluster, nor record it again.
        self._torn: set[str] = set()
        # Per cluster, an interpreter importing PRELOAD while the cluster starts, until
        # start_runtime hands it the runtime to run (providers/warm.py).
        self._warm: dict[str, subprocess.Popen[bytes]] = {}
        # Per cluster, the connections to its runtimes handed out (ssh_drop cuts them).
        self._connections: dict[str, list[LocalRuntime]] = {}
        # One JSON record per live cluster, written before anything else is known of it.
        self.state_dir = state_dir
        # job.code_dir: first on the PYTHONPATH of the clusters' processes. It must reach
        # the cluster itself: a Ray worker takes its environment from its raylet.
        self.code_dir = code_dir
        # cloud.dashboard: each cluster's Ray dashboard, on 127.0.0.1 (its URL in the
        # cluster's info, which the journal's provisioned event carries).
        self.dashboard = dashboard

    def precheck(self, regions: list[str]) -> None:
        """Ray is installed, and a cluster can have its folder and listen on 127.0.0.1;
        a few milliseconds (Ray is found, not imported)."""
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ProviderUnavailable("the local provider needs Ray: pip install -c constraints.txt -e .")
        region = regions[0] if regions else "local"
        try:
            port_range(os.environ.get(PORTS_ENV), ephemeral_low())
        except ValueError as exc:
            raise ProvisionError(ProvisionErrorKind.PRECHECK, region, str(exc)) from None
        temp = tempfile.gettempdir()
        if not os.access(temp, os.W_OK | os.X_OK):
            raise ProvisionError(
                ProvisionErrorKind.PRECHECK, region, f"cannot write {temp}, where each cluster keeps its folder"
            )
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
        except OSError as exc:
            raise ProvisionError(
                ProvisionErrorKind.PRECHECK, region, f"cannot listen on 127.0.0.1 ({exc.strerror or exc})"
            ) from None

    def plan(self, cfg: Config, run_id: str, out_dir: str) -> Plan:
        from providers.local.plan import local_plan

        return local_plan(cfg)

    def _record(self, handle: ClusterHandle) -> None:
        if self.state_dir is None:
            return
        os.makedirs(self.state_dir, exist_ok=True)
        record = {"name": handle.name, "region": handle.region, "address": handle.address, "info": handle.info}
        write_private(os.path.join(self.state_dir, f"{handle.name}.json"), json.dumps(record).encode())

    def _forget(self, handle: ClusterHandle) -> None:
        if self.state_dir is not None:
            try:
                os.unlink(os.path.join(self.state_dir, f"{handle.name}.json"))
            except FileNotFoundError:
                pass

    def find(self, cluster_name: str) -> ClusterHandle | None:
        if self.state_dir is None:
            return None
        try:
            with open(os.path.join(self.state_dir, f"{cluster_name}.json"), encoding="utf-8") as fh:
                rec = json.load(fh)
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return ClusterHandle(rec["name"], rec["region"], self.name, rec["address"], rec["info"])

    def cluster_env(self, cluster: ClusterHandle) -> dict[str, str]:
        env = {
            **os.environ,
            **cluster.info.get("env", {}),
            **BASE_ENV,
            **collectives_env(loopback_interface(psutil.net_if_addrs())),
            MARKER: marker_of(cluster),
            "RAY_TMPDIR": cluster.info["temp_dir"],
            "RAY_AUTH_TOKEN_PATH": os.path.join(_base_dir(cluster), TOKEN_NAME),
        }
        # A token in the controller's environment would win over the cluster's file.
        env.pop("RAY_AUTH_TOKEN", None)
        env.pop(NODE_MARKER, None)
        if self.code_dir:
            rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != self.code_dir]
            env["PYTHONPATH"] = os.pathsep.join([self.code_dir, *rest])
        return env

    def launch(
        self, region: RegionSpec, cluster_name: str, timeout_s: float, env: dict[str, str] | None = None
    ) -> ClusterHandle:
        # Ray's unix socket paths must stay short: keep it all under /tmp. Ray makes its
        # temp dir world-writable (0777), so it lives inside a 0700 folder of ours, with
        # the cluster's token and the scratch copy beside it (not in Ray's shared dir).
        base = tempfile.mkdtemp(prefix="orch-")
        temp_dir = os.path.join(base, "ray")
        os.mkdir(temp_dir, 0o700)
        write_token(os.path.join(base, TOKEN_NAME))
        port = free_port()
        log_path = os.path.join(base, "ray-start.log")
        handle = ClusterHandle(
            name=cluster_name,
            region=region.name,
            provider=self.name,
            address=f"127.0.0.1:{port}",
            info={
                "base_dir": base,
                "temp_dir": temp_dir,
                "port": port,
                "log": log_path,
                "env": dict(env or {}),
                "scratch_dir": os.path.join(base, "scratch"),
                # Each Ray Train worker's output (rank-<R>.log), kept before teardown.
                "log_dir": os.path.join(base, logfiles.LOG_DIR),
                # What its processes carry in ORCHESTRATOR_CLUSTER: the name and a token of
                # this launch, so that another controller's cluster of the same name on this
                # machine (another ORCHESTRATOR_HOME, the same run id) is never taken for it.
                "marker": f"{cluster_name}@{secrets.token_hex(4)}",
            },
        )
        os.mkdir(handle.info["scratch_dir"], 0o700)
        os.mkdir(handle.info["log_dir"], 0o700)
        dashboard_port = free_port() if self.dashboard else None
        if dashboard_port is not None:
            handle.info["dashboard"] = f"http://127.0.0.1:{dashboard_port}"
            handle.info["dashboard_access"] = f"its token: {os.path.join(base, TOKEN_NAME)}"
        ports = {flag: free_port() for flag in NODE_PORT_FLAGS}
        argv = [
            sys.executable,
            "-m",
            "providers.raystart",  # Ray's own `ray`, without its Serve import
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={region.num_cpus}",
            f"--num-gpus={region.num_gpus}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            node_label(0),
            *dashboard_flags(dashboard_port),
            # Two of the head's daemons an attempt's cluster never uses, 2.5 s of a core
            # per cluster: Ray Client's server (drivers connect by the GCS address), and
            # the autoscaler's monitor (a local cluster is one fixed node).
            "--no-ray-client",  # providers.raystart's own
            "--no-monitor",
            # The driver connects with log_to_driver=False: nobody reads the streamed logs
            # (each training worker writes its own rank-<R>.log in the cluster's log_dir).
            "--include-log-monitor=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
            *(f"{k}={v}" for k, v in ports.items()),
        ]
        head_env = self.cluster_env(handle)
        if region.nodes > 1:
            # A node lost must be told from a slow one fast (providers/local/nodes.py).
            head_env.update(NODE_HEALTH_ENV)
            handle.info.update(num_cpus=region.num_cpus, num_gpus=region.num_gpus, nodes=[])
        with open(log_path, "wb") as log:
            head = subprocess.Popen(
                argv,
                env=head_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._heads[cluster_name] = head
        handle.info["head_pid"] = head.pid
        self._start_warm(handle)
        self._record(handle)
        deadline = time.monotonic() + timeout_s
        workers = list(range(1, region.nodes))
        head_up = False
        while time.monotonic() < deadline:
            if head.poll() is not None:
                tail = _tail(log_path)
                self.teardown(handle)
                raise ProvisionError(
                    ProvisionErrorKind.TRANSIENT,
                    region.name,
                    f"ray start exited with {head.returncode}: {tail}",
                )
            if workers and not handle.info["nodes"] and _port_open(port):
                # The GCS answers: the worker nodes start (their Ray import) while the
                # head's raylet comes up; each waits for the head's registration itself.
                handle.info["nodes"] = [self._start_node(handle, i) for i in workers]
                self._record(handle)
            failed = next(filter(None, (self._node_failed(handle, r) for r in handle.info.get("nodes", []))), None)
            if failed is not None:
                self.teardown(handle)
                raise ProvisionError(ProvisionErrorKind.TRANSIENT, region.name, failed)
            head_up = head_up or (READY_LINE in _tail(log_path, 4000) and _port_open(port))
            nodes = handle.info.get("nodes", [])
            if head_up and len(nodes) == len(workers) and all([self._node_ready(r) for r in nodes]):
                if workers:
                    self._record(handle)  # the raylets found
                return handle
            time.sleep(0.1)
        self.teardown(handle)
        raise ProvisionError(
            ProvisionErrorKind.TIMEOUT,
            region.name,
            f"cluster not ready after {timeout_s:g}s (recovery.provision_timeout_s); see {log_path}",
        )

    # --- worker nodes -------------------------------------------------------------------
    def _start_node(self, cluster: ClusterHandle, index: int, replacement: bool = False) -> dict[str, Any]:
        """Worker node ``index`` started (not yet up): its record for info["nodes"];
        ``replacement``: for a lost node (its idle worker imports ahead, REPLACEMENT_ENV)."""
        node_dir = os.path.join(_base_dir(cluster), f"node-{index}")
        shutil.rmtree(node_dir, ignore_errors=True)  # a node replaced: the old one's files
        os.mkdir(node_dir, 0o700)
        # The node's own scratch disk (<scratch_dir>/node-<k>, where the runtime keeps what
        # it keeps on a worker node): a replacement starts with it empty, as a new machine.
        if cluster.info.get("scratch_dir"):
            shutil.rmtree(os.path.join(cluster.info["scratch_dir"], f"node-{index}"), ignore_errors=True)
        log_path = os.path.join(_base_dir(cluster), f"node-{index}.log")
        argv = worker_argv(
            cluster.address,
            int(cluster.info["num_cpus"]),
            int(cluster.info["num_gpus"]),
            OBJECT_STORE_BYTES,
            node_dir,
            ports := {flag: free_port() for flag in NODE_PORT_FLAGS},
            index,
        )
        env = {
            **self.cluster_env(cluster),
            "RAY_TMPDIR": node_dir,
            NODE_MARKER: str(index),
            **(REPLACEMENT_ENV if replacement else {}),
        }
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self._nodes.setdefault(cluster.name, {})[index] = proc
        return {
            "index": index,
            "pid": proc.pid,
            "started": _create_time(proc.pid),
            "log": log_path,
            "dir": node_dir,
            # How the cluster's GCS knows the node: the one port of its own it listens on.
            "manager_port": ports["--node-manager-port"],
        }

    def _node_failed(self, cluster: ClusterHandle, rec: dict[str, Any]) -> str | None:
        """Why worker node ``rec`` will not come up (its ``ray start`` exited), or None."""
        proc = self._nodes.get(cluster.name, {}).get(int(rec["index"]))
        if proc is None or proc.poll() is None:
            return None
        return f"worker node {rec['index']}'s ray start exited with {proc.returncode}: {_tail(rec['log'])}"

    @staticmethod
    def _node_ready(rec: dict[str, Any]) -> bool:
        """Whether worker node ``rec`` is up (its ready line: Ray prints it once the node
        is registered with the GCS); its raylet then found and put in ``rec``."""
        if "raylet" in rec:
            return True
        if READY_LINE not in _tail(rec["log"], 16000):
            return False
        found = find_raylet(int(rec["pid"]))
        rec["raylet"], rec["raylet_started"] = found if found is not None else (None, None)
        return True

    def health(self, cluster: ClusterHandle) -> HealthCheck:
        now = time.time()
        head = self._heads.get(cluster.name)
        if head is not None:
            if head.poll() is not None:
                return HealthCheck(Health.GONE, now, f"the head's process exited ({head.returncode})")
        elif not _running(int(cluster.info.get("head_pid", -1))):
            return HealthCheck(Health.GONE, now, "the head's process is gone")
        port = int(cluster.info["port"])
        if not _port_open(port):
            return HealthCheck(Health.NOT_UP, now, f"the head's port {port} does not answer")
        return HealthCheck(Health.UP, now)

    def _start_warm(self, handle: ClusterHandle) -> None:
        with open(os.path.join(handle.info["base_dir"], "warm.log"), "wb") as log:
            try:
                warm = subprocess.Popen(
                    [sys.executable, "-m", "providers.warm", *PRELOAD],
                    env=self.cluster_env(handle),
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError:
                return  # the runtime starts cold
        self._warm[handle.name] = warm
        handle.info["warm_pid"] = warm.pid

    def _hand_to_warm(
        self, cluster: ClusterHandle, argv: list[str], env: dict[str, str], log_path: str
    ) -> RuntimeProcess | None:
        """The cluster's warm interpreter, now running ``argv``; None if it cannot."""
        warm = self._warm.pop(cluster.name, None)
        if warm is None or warm.stdin is None:
            return None
        if warm.poll() is not None or argv[:2] != [sys.executable, "-m"] or len(argv) < 3:
            self._drop_warm(warm)
            return None
        order = {"module": argv[2], "args": argv[3:], "env": env, "log": os.path.abspath(log_path)}
        try:
            warm.stdin.write(json.dumps(order).encode() + b"\n")
            warm.stdin.close()
        except OSError:
            self._drop_warm(warm)
            return None
        return warm

    @staticmethod
    def _drop_warm(warm: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(warm.pid, signal.SIGKILL)
        except OSError:
            pass
        if warm.stdin is not None:
            warm.stdin.close()
        warm.wait(timeout=10)

    def start_runtime(
        self, cluster: ClusterHandle, argv: list[str], env: dict[str, str], log_path: str
    ) -> RuntimeProcess:
        warm = self._hand_to_warm(cluster, argv, env, log_path)
        if warm is not None:
            cluster.info.setdefault("runtime_pids", []).append(warm.pid)
            self._record(cluster)
            return self._connect(cluster, warm)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                argv,
                env={**self.cluster_env(cluster), **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        cluster.info.setdefault("runtime_pids", []).append(proc.pid)
        self._record(cluster)
        return self._connect(cluster, proc)

    def _connect(self, cluster: ClusterHandle, proc: subprocess.Popen[bytes]) -> LocalRuntime:
        conn = LocalRuntime(proc)
        self._connections.setdefault(cluster.name, []).append(conn)
        return conn

    def reattach(self, cluster: ClusterHandle, proc: RuntimeProcess) -> RuntimeProcess | None:
        """The runtime is this controller's child: a new handle on it while it runs."""
        if isinstance(proc, LocalRuntime) and proc.proc.poll() is None:
            return self._connect(cluster, proc.proc)
        return None

    def cut_connection(self, cluster: ClusterHandle) -> int:
        """chaos ssh_drop: cut the controller's connections to the cluster's running
        runtimes (their processes untouched); how many were cut."""
        live = [c for c in self._connections.get(cluster.name, []) if not c.cut and c.proc.poll() is None]
        for conn in live:
            conn.cut = True
        return len(live)

    def _sessions(self, cluster: ClusterHandle) -> frozenset[int]:
        # All were started with start_new_session: their pid is their session's id.
        started = [cluster.info.get("head_pid"), cluster.info.get("warm_pid")]
        nodes = [int(rec["pid"]) for rec in cluster.info.get("nodes", [])]
        return frozenset([*(int(p) for p in started if p), *cluster.info.get("runtime_pids", []), *nodes])

    def nodes(self, cluster: ClusterHandle) -> list[NodeCheck]:
        started = self._nodes.get(cluster.name, {})
        return [node_check(rec, started.get(int(rec["index"]))) for rec in cluster.info.get("nodes", [])]

    def _node_record(self, cluster: ClusterHandle, index: int) -> dict[str, Any]:
        for rec in cluster.info.get("nodes", []):
            if int(rec["index"]) == index:
                return dict(rec)
        count = len(cluster.info.get("nodes", []))
        has = f"its worker nodes: 1..{count}" if count else "it has none"
        raise ValueError(f"cluster {cluster.name} has no worker node {index} ({has})")

    def node_processes(self, cluster: ClusterHandle, index: int) -> list[int]:
        rec = self._node_record(cluster, index)
        return node_marked(marker_of(cluster), index, frozenset([int(rec["pid"])]))

    def _kill_node(self, cluster: ClusterHandle, index: int) -> list[int]:
        rec = self._node_record(cluster, index)
        killed = kill_until_gone(
            lambda: node_marked(marker_of(cluster), index, frozenset([int(rec["pid"])])),
            f"node {index} of cluster {cluster.name}",
        )
        proc = self._nodes.get(cluster.name, {}).pop(index, None)
        if proc is not None:
            proc.wait(timeout=10)
        return killed

    def drop_node(self, cluster: ClusterHandle, index: int) -> None:
        try:
            self._kill_node(cluster, index)
        except (RuntimeError, KeyError, ValueError):
            pass  # a process stuck in the kernel, or no such node: nothing more to do here

    def replace_node(self, cluster: ClusterHandle, index: int, timeout_s: float) -> None:
        # What is left of the old node goes first: a hung node must never wake up beside
        # its replacement (its workers would come back to a group that moved on).
        try:
            self._kill_node(cluster, index)
        except RuntimeError as exc:  # a process that survives SIGKILL (stuck in the kernel)
            raise ProvisionError(ProvisionErrorKind.TRANSIENT, cluster.region, str(exc)) from None
        self._not_torn(cluster, index)
        rec = self._start_node(cluster, index, replacement=True)
        self._not_torn(cluster, index)
        self._set_node(cluster, rec)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._not_torn(cluster, index)
            failed = self._node_failed(cluster, rec)
            if failed is not None:
                self._kill_node(cluster, index)
                raise ProvisionError(ProvisionErrorKind.TRANSIENT, cluster.region, failed)
            if self._node_ready(rec):
                self._set_node(cluster, rec)
                return
            time.sleep(0.1)
        self._kill_node(cluster, index)
        raise ProvisionError(
            ProvisionErrorKind.TIMEOUT,
            cluster.region,
            f"worker node {index} not up after {timeout_s:g}s (recovery.node_replace_timeout_s); see {rec['log']}",
        )

    def _not_torn(self, cluster: ClusterHandle, index: int) -> None:
        """ProvisionError once the cluster is torn down, what the replacement started killed."""
        if cluster.name not in self._torn:
            return
        self._kill_node(cluster, index)
        self._forget(cluster)
        raise ProvisionError(ProvisionErrorKind.NO_CAPACITY, cluster.region, "the cluster was torn down")

    def _set_node(self, cluster: ClusterHandle, rec: dict[str, Any]) -> None:
        # A new list, not one changed in place: nodes() may be reading the old one.
        others = [r for r in cluster.info.get("nodes", []) if int(r["index"]) != int(rec["index"])]
        cluster.info["nodes"] = sorted([*others, dict(rec)], key=lambda r: int(r["index"]))
        self._record(cluster)

    def processes(self, cluster: ClusterHandle) -> list[int]:
        return marked(marker_of(cluster), self._sessions(cluster))

    def keep_logs(self, cluster: ClusterHandle, dest_dir: str) -> KeptLogs:
        # On this machine: whatever the cluster's processes wrote is there until teardown,
        # a region killed by chaos (kill_region) included.
        log_dir = cluster.info.get("log_dir")
        if not log_dir:
            return KeptLogs(error=f"cluster {cluster.name} has no log folder (started by an older version)")
        return logfiles.keep(str(log_dir), dest_dir)

    def teardown(self, cluster: ClusterHandle) -> None:
        self._torn.add(cluster.name)
        # SIGTERM leaves gcs_server and raylet up for seconds; nothing here needs a
        # graceful exit (checkpoints are committed or they are not), so SIGKILL.
        kill_all(marker_of(cluster), self._sessions(cluster))
        warm = self._warm.pop(cluster.name, None)
        if warm is not None:
            self._drop_warm(warm)
        self._connections.pop(cluster.name, None)
        head = self._heads.pop(cluster.name, None)
        if head is not None:
            head.wait(timeout=10)
        for node in self._nodes.pop(cluster.name, {}).values():
            node.wait(timeout=10)
        if cluster.info.get("temp_dir"):
            shutil.rmtree(_base_dir(cluster), ignore_errors=True)
        self._forget(cluster)


def dashboard_flags(port: int | None) -> list[str]:
    """``ray start``'s dashboard flags: none (``port`` None: not even the API server Ray
    starts without one), or the dashboard on 127.0.0.1:``port`` only (Ray binds it to
    every address unless told)."""
    if port is None:
        return ["--include-dashboard=false", "--no-api-server"]  # the latter providers.raystart's own
    return ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={port}"]


def marker_of(cluster: ClusterHandle) -> str:
    """The ORCHESTRATOR_CLUSTER value its processes carry (a cluster recorded by an older
    version: its name)."""
    return str(cluster.info.get("marker") or cluster.name)


def _base_dir(cluster: ClusterHandle) -> str:
    # A cluster recorded by an older version has no base_dir: its temp dir was the base.
    return str(cluster.info.get("base_dir") or cluster.info["temp_dir"])


def write_token(path: str) -> None:
    """A fresh random token for one cluster, readable by this user only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(secrets.token_hex(32))


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _running(pid: int) -> bool:
    # Not ours (a resumed controller): once dead it may linger as a zombie of init's.
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _tail(path: str, limit: int = 600) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode(errors="replace").strip()
    except OSError:
        return ""
