"""The SkyPilot provider: Ray clusters on AWS, GCP, Kubernetes and on-prem Slurm through SkyPilot's SDK.

A region's cluster is one SkyPilot cluster running one long job, the task built by
:func:`providers.skypilot.task.task_config`: its set-up installs the project on the nodes,
its run command (``scripts.RUN_SCRIPT``) starts Ray (the head on rank 0, the other nodes
joining it) and then stays up until ``sky.down``. The runtime driver is started on the
head through the SSH configuration SkyPilot writes for the cluster (``ssh``), detached
from that ssh session (its own session, its log and exit status in files on the node),
which then follows it: the runtime's exit status comes back as the local ``ssh``'s, and
a lost session is re-attached by a new ssh that follows it again.

Every SDK call goes through :meth:`SkyPilotProvider._sdk` (``sdk.call``), the one place
where transient SkyPilot errors are retried; provisioning errors are classified
(``errors.classify``) for the failure policy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from secrets import token_hex
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.wire import logfiles
from orchestrator.wire.logfiles import KeptLogs
from providers.base import (
    Capability,
    ClusterHandle,
    NodeCheck,
    Plan,
    ProvisionError,
    ProvisionErrorKind,
    RegionSpec,
    RuntimeProcess,
)
from providers.skypilot import sdk, slurm
from providers.skypilot.credentials import RAY_TOKEN_ENV, forwarded_secrets, split_secrets, stdin_env
from providers.skypilot.errors import classify, first_line
from providers.skypilot.logs import fetch_kept
from providers.skypilot.scripts import (
    CODE_PATH,
    NODES_MISSING,
    NOT_OURS,
    READY_TIMEOUT_S,
    follow_script,
    kill_script,
    ready_probe,
    start_script,
)
from providers.skypilot.sdk import Prefixed, build_task, import_sky, sky_health, status_of
from providers.skypilot.ssh import SshRuntime, name_on_cloud, remote, run_ssh, ssh_argv
from providers.skypilot.task import DEFAULT_PYTHON, dashboard_info, node_extras, sky_cluster_name, task_config
from recovery.detection import Health, HealthCheck
from recovery.fsio import write_private
from recovery.retry import Deadline
from recovery.signing import cluster_token

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, RegionConfig

T = TypeVar("T")
# How often a cluster's health is asked of SkyPilot (a forced refresh takes seconds).
HEALTH_INTERVAL_S = 15.0
# How long one ssh to the head looks for ray-ready (every 0.2 s) before the next.
READY_LOOK_S = 15.0


class SkyPilotProvider:
    name = "skypilot"
    # Not LOCAL_PROCESSES: processes() are the local ssh ends, and the runtime's pids are
    # the remote nodes', never to be signalled here (chaos kill_worker goes through
    # kill_worker, on the head). Not NODES nor REPLACE_NODE: SkyPilot answers for a cluster
    # as a whole and launches whole clusters. KEEPS_RUNTIME: a lost cluster's node runtime
    # stays for a launch under its name; the controller gives such a provider one cluster
    # name per run and region.
    capabilities = frozenset(
        {
            Capability.KILL_WORKER,
            Capability.KILL_CLUSTER,
            Capability.FREEZE_CLUSTER,
            Capability.CUT_CONNECTION,
            Capability.TOKEN_KEY,
            Capability.KEEPS_RUNTIME,
        }
    )

    def __init__(
        self,
        regions: dict[str, RegionConfig],
        state_dir: str | None = None,
        workdir: str | None = None,
        out: Any = None,
        code_dir: str = "",
        control_store: str | None = None,
        dashboard: bool = False,
    ) -> None:
        self.regions = regions
        # cloud.dashboard: each cluster's Ray dashboard on its head's loopback.
        self.dashboard = dashboard
        # Every cluster's runtime writes its own store, the others (replicas, fallbacks)
        # and the control store: credentials go where one of them needs them, nowhere else.
        stores = [str(getattr(rc, "store", "")) for rc in regions.values()]
        self.forward = forwarded_secrets([*stores, control_store or ""])
        self.extras = node_extras([*stores, control_store or ""])
        self.state_dir = state_dir
        self.workdir = workdir or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        # job.code_dir: the user's code, synced to every cluster this provider launches.
        self.code_dir = code_dir
        self.out = out or sys.stderr
        self._health: dict[str, HealthCheck] = {}
        # Per cluster, the ssh connections following its runtimes (ssh_drop cuts them).
        self._connections: dict[str, list[SshRuntime]] = {}
        self._pollers: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}
        self._token_key: bytes | None = None

    def precheck(self, regions: list[str]) -> None:
        """Every cloud the regions use has credentials, checked by SkyPilot's own cloud
        classes on this machine (``credentials.precheck``: no API server, nothing launched)."""
        from providers.skypilot.credentials import precheck

        unknown = [r for r in regions if r not in self.regions]
        if unknown:
            raise ProvisionError(ProvisionErrorKind.PRECHECK, unknown[0], "not a region of this cloud config")
        precheck({r: self.regions[r] for r in regions})

    def plan(self, cfg: Config, run_id: str, out_dir: str) -> Plan:
        """The placements SkyPilot's optimizer picks, priced (``plan.skypilot_plan``)."""
        from providers.skypilot.plan import skypilot_plan

        return skypilot_plan(cfg, run_id, out_dir)

    def use_token_key(self, token_key: bytes) -> None:
        """Derive each cluster's Ray token from the run's secret (recovery/signing.py), so a
        controller resumed after a crash has the token of every cluster it finds again."""
        self._token_key = token_key

    def _token(self, cluster_name: str) -> str | None:
        token = self._tokens.get(cluster_name)
        if token is None and self._token_key is not None:
            token = cluster_token(self._token_key, cluster_name)
        return token

    # -- the one place SDK calls are retried --------------------------------------------
    def _sdk(self, what: str, call: Callable[[], T]) -> T:
        return sdk.call(what, call, self._say)

    def _say(self, line: str) -> None:
        print(f"skypilot: {line}", file=self.out, flush=True)

    # -- records -------------------------------------------------------------------------
    def _record_path(self, cluster_name: str) -> str | None:
        return None if self.state_dir is None else os.path.join(self.state_dir, f"{cluster_name}.json")

    def _record(self, handle: ClusterHandle) -> None:
        path = self._record_path(handle.name)
        if path is None:
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        record = {"name": handle.name, "region": handle.region, "address": handle.address, "info": handle.info}
        write_private(path, json.dumps(record).encode())

    def _forget(self, cluster_name: str) -> None:
        path = self._record_path(cluster_name)
        if path is not None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def find(self, cluster_name: str) -> ClusterHandle | None:
        path = self._record_path(cluster_name)
        if path is None:
            return None
        try:
            with open(path, encoding="utf-8") as fh:
                rec = json.load(fh)
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return ClusterHandle(rec["name"], rec["region"], self.name, rec["address"], rec["info"])

    # -- launch ------------------------------------------------------------------------
    def task_for(
        self, region: str, cluster_name: str, env: dict[str, str] | None = None, spot: bool | None = None
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The region's task and its secrets; ``spot`` False: on-demand, whatever the region's
        use_spot (a deadline chose it); None: as the region says."""
        rc = self.regions[region]
        if spot is not None and spot != rc.use_spot:
            rc = dataclasses.replace(rc, use_spot=spot)
        envs, secrets = split_secrets(dict(env or {}), self.forward)
        ray_port, dashboard_port = random.sample(range(20000, 30000), 2)
        config = task_config(
            region,
            rc,
            cluster_name,
            envs,
            workdir=self.workdir,
            ray_port=ray_port,
            secret_names=tuple(sorted(secrets)),
            code_dir=self.code_dir,
            extras=self.extras,
            dashboard_port=dashboard_port if self.dashboard else None,
        )
        return config, secrets

    def launch(
        self, region: RegionSpec, cluster_name: str, timeout_s: float, env: dict[str, str] | None = None
    ) -> ClusterHandle:
        if region.name not in self.regions:
            raise ProvisionError(ProvisionErrorKind.PRECHECK, region.name, "not a region of this cloud config")
        sky = import_sky()
        # The cluster's Ray token: to its nodes as a SkyPilot secret, to the runtime over
        # ssh's stdin. Derived from the run's secret when the controller gave its key (a
        # resumed controller derives it again); random otherwise (held in this process only).
        token = self._token(cluster_name) or token_hex(32)
        config, secrets = self.task_for(region.name, cluster_name, {**(env or {}), RAY_TOKEN_ENV: token}, region.spot)
        self._tokens[cluster_name] = token
        sky_name = config["name"]
        handle = ClusterHandle(
            name=cluster_name,
            region=region.name,
            provider=self.name,
            address=f"127.0.0.1:{config['envs']['ORCH_RAY_PORT']}",
            info={
                "sky_cluster": sky_name,
                "infra": self.regions[region.name].infra,
                "node_dir": config["envs"]["ORCH_NODE_DIR"],
                "temp_dir": config["envs"]["ORCH_NODE_DIR"],
                "scratch_dir": config["envs"]["ORCH_NODE_DIR"] + "/scratch",
                # On every node: each Ray Train worker's rank-<R>.log, fetched before teardown.
                "log_dir": f"{config['envs']['ORCH_NODE_DIR']}/{logfiles.LOG_DIR}",
                "python": config["envs"]["ORCH_PYTHON"],
                "num_nodes": config["num_nodes"],
                "env": {k: v for k, v in config["envs"].items() if not k.startswith("ORCH_")},
                # Where job.code_dir lands on the nodes ("": none); start_runtime reads it.
                "code_dir": config["envs"].get("ORCH_CODE_DIR", ""),
            },
        )
        if "ORCH_DASHBOARD_PORT" in config["envs"]:
            handle.info.update(
                dashboard_info(sky_name, int(config["envs"]["ORCH_DASHBOARD_PORT"]), handle.info["node_dir"])
            )
        # Recorded before SkyPilot hears of it: a crashed controller finds it to tear down.
        self._record(handle)
        try:
            task = build_task(config, secrets)
        except Exception as exc:
            self._forget(cluster_name)
            raise ProvisionError(ProvisionErrorKind.PRECHECK, region.name, f"task: {first_line(exc)}") from None
        self._say(f"launching {sky_name} on {handle.info['infra']} (region {region.name})")
        t0 = time.monotonic()
        try:
            self._launch_within(sky, task, sky_name, timeout_s, region.name)
            handle.info["name_on_cloud"] = name_on_cloud(sky_name)
            self._wait_ready(handle, max(5.0, timeout_s - (time.monotonic() - t0)))
        except ProvisionError:
            self.teardown(handle)
            raise
        except Exception as exc:
            c = classify(exc)
            self._say(f"{region.name}: {c.kind}: {c.message}")
            self.teardown(handle)
            raise ProvisionError(c.kind, region.name, c.message) from None
        except BaseException:
            self.teardown(handle)
            raise
        self._say(f"{sky_name} is up in {time.monotonic() - t0:.0f}s; Ray at {handle.address} on its head")
        if "dashboard" in handle.info:
            self._say(f"Ray dashboard on its head at {handle.info['dashboard']}: {handle.info['dashboard_access']}")
        with self._lock:
            self._health[cluster_name] = HealthCheck(Health.UP, time.time(), "launched")
        self._record(handle)
        return handle

    def _launch_within(self, sky: Any, task: Any, sky_name: str, timeout_s: float, region: str) -> None:
        """sky.launch, its log streamed to our output, cancelled past the deadline."""
        request_id = self._sdk("sky.launch", lambda: sky.launch(task, cluster_name=sky_name))
        result: dict[str, Any] = {}

        def stream() -> None:
            try:
                result["value"] = sky.stream_and_get(request_id, output_stream=Prefixed(self.out))
            except BaseException as exc:
                result["error"] = exc

        def cancel() -> None:
            try:
                sky.get(sky.api_cancel(request_id))
            except Exception:  # the teardown that follows is what counts
                pass

        t = threading.Thread(target=stream, name=f"sky-launch-{sky_name}", daemon=True)
        t.start()
        try:
            t.join(timeout_s)
        except BaseException:  # interrupted (SIGINT/SIGTERM): the launch must not go on without us
            cancel()
            raise
        if t.is_alive():
            cancel()
            raise ProvisionError(
                ProvisionErrorKind.TIMEOUT,
                region,
                f"not up after {timeout_s:g}s (recovery.provision_timeout_s); launch cancelled",
            )
        if "error" in result:
            raise result["error"]

    def _wait_ready(self, handle: ClusterHandle, timeout_s: float) -> None:
        """The head's ray-ready (its Ray up and, on a multi-node cluster, every node
        joined), or ProvisionError: with the head's own line (ray-failed) when some nodes
        never joined, TIMEOUT with what is known otherwise."""
        wait_s = min(timeout_s, READY_TIMEOUT_S)
        deadline = Deadline(wait_s)
        probe_cmd = ready_probe(handle.info["node_dir"], wait_s=READY_LOOK_S)
        while not deadline.expired:
            probe = run_ssh(handle, remote(handle, probe_cmd), check=False, timeout_s=READY_LOOK_S + 30)
            if probe.returncode == 0:
                return
            if probe.returncode == NODES_MISSING:
                why = (probe.stdout.strip().splitlines() or ["the nodes did not all join"])[-1]
                raise ProvisionError(ProvisionErrorKind.TIMEOUT, handle.region, why)
            if probe.returncode != 1:
                time.sleep(1.0)  # ssh itself failed: not at once again
        nodes = int(handle.info.get("num_nodes", 1))
        what = "Ray did not start on the head"
        if nodes > 1:
            what += f" and its {nodes - 1} other node(s)"
        raise ProvisionError(ProvisionErrorKind.TIMEOUT, handle.region, f"{what} within {wait_s:g}s")

    # -- the head: a worker killed, the runtime started and followed over ssh ---------------
    def kill_worker(self, cluster: ClusterHandle, pid: int) -> str | None:
        """SIGKILL ``pid`` on the cluster's head if it is one of the cluster's Ray
        processes there; why not, or None once killed (chaos kill_worker)."""
        try:
            done = run_ssh(cluster, remote(cluster, kill_script(pid, cluster.info["node_dir"])), check=False)
        except (OSError, subprocess.SubprocessError, KeyError) as exc:
            return f"cannot reach the head of {cluster.name}: {exc}"
        if done.returncode == 0:
            return None
        if done.returncode == NOT_OURS:
            return f"pid {pid} is not a process of cluster {cluster.name} on its head"
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"cannot signal pid {pid} on the head of {cluster.name}: ssh exited {done.returncode}: {tail}"

    def kill_cluster(self, cluster: ClusterHandle, graceful: bool = False) -> str | None:
        """Lose the cluster as a region is lost (chaos kill_region): on Slurm, every process
        of its allocation SIGKILLed and the allocation cancelled; why not, or None once
        Slurm lists it no more. ``graceful``: a plain scancel, None once sent. A cloud's
        cluster is not lost on purpose here."""
        return slurm.cancel_allocation(cluster.info, graceful=graceful)

    def freeze_cluster(self, cluster: ClusterHandle) -> str | None:
        """Freeze the cluster as a hung region is (chaos hang_region, partition_region): on
        Slurm, SIGSTOP to every process of its allocation; why not, or None once sent."""
        return slurm.signal_allocation(cluster.info, "STOP")

    def thaw_cluster(self, cluster: ClusterHandle) -> str | None:
        """The frozen cluster's processes continued (SIGCONT); why not, or None once sent."""
        return slurm.signal_allocation(cluster.info, "CONT")

    def start_runtime(
        self, cluster: ClusterHandle, argv: list[str], env: dict[str, str], log_path: str
    ) -> RuntimeProcess:
        """The runtime on the head, with the node's Python: ``argv[0]`` (this machine's
        interpreter) is replaced, and the spec (``argv[-1]``) goes over stdin, so the node
        needs no view of this machine's files (the control channel and stores excepted)."""
        spec_path = argv[-1]
        token = self._token(cluster.name)
        if token is not None:
            env = {**env, RAY_TOKEN_ENV: token}
        remote_spec = f"{cluster.info['node_dir']}/spec-{os.getpid()}-{int(time.time() * 1000)}.json"
        hidden = stdin_env(env)
        envs = {**cluster.info.get("env", {}), **{k: v for k, v in env.items() if k not in hidden}}
        if int(cluster.info.get("num_nodes", 1)) == 1:
            envs["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # one node: loopback only, as Ray itself
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in envs.items())
        python = cluster.info.get("python", DEFAULT_PYTHON)
        module_args = " ".join(shlex.quote(a) for a in argv[1:-1])
        # job.code_dir first on the driver's PYTHONPATH, as on the workers' (RUN_SCRIPT).
        code_path = (
            f"ORCH_CODE_DIR={shlex.quote(cluster.info['code_dir'])}; {CODE_PATH}; "
            if cluster.info.get("code_dir")
            else ""
        )
        # Secrets (the run's key) come first on stdin, one line each, read by the remote
        # shell into its own variables: never on a command line (ps on either machine),
        # in SkyPilot's task records, or in a file on the node.
        reads = "".join(f"IFS= read -r {k}; export {k}; " for k in hidden)
        command = (
            f"set -e; mkdir -p {cluster.info['node_dir']}; {reads}cat > {remote_spec}; {code_path}"
            f"export RAY_AUTH_MODE=token {exports}; "
            + start_script(f"{python} {module_args} {remote_spec}", remote_spec)
        )
        with open(spec_path, "rb") as fh:
            payload = "".join(f"{hidden[k]}\n" for k in hidden).encode() + fh.read()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                ssh_argv(cluster, remote(cluster, command)),
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        assert proc.stdin is not None
        try:
            proc.stdin.write(payload)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # ssh died at once: its exit status says why
        self._watch(cluster)
        return self._connected(cluster, proc, remote_spec, log_path)

    def _connected(
        self, cluster: ClusterHandle, proc: subprocess.Popen[bytes], remote_spec: str, log_path: str
    ) -> SshRuntime:
        cluster.info.setdefault("runtime_pids", []).append(proc.pid)
        self._record(cluster)
        conn = SshRuntime(proc, lambda: self._refresh(cluster), remote_spec, log_path)
        with self._lock:
            self._connections.setdefault(cluster.name, []).append(conn)
        return conn

    def reattach(self, cluster: ClusterHandle, proc: RuntimeProcess) -> RuntimeProcess | None:
        """A new ssh following the runtime, when ``proc``'s ssh failed or was killed (its
        status is none of the runtime's); None when ``proc`` ended with the runtime's
        status, or is no connection of ours."""
        if not isinstance(proc, SshRuntime) or not proc.connection_failed:
            return None
        self._say(f"{cluster.info.get('sky_cluster', cluster.name)}: re-attaching to the runtime")
        with open(proc.log_path, "ab") as log:
            follower = subprocess.Popen(
                ssh_argv(cluster, remote(cluster, follow_script(proc.remote_spec))),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self._connected(cluster, follower, proc.remote_spec, proc.log_path)

    def cut_connection(self, cluster: ClusterHandle) -> int:
        """chaos ssh_drop: SIGKILL the local ssh sessions following the cluster's runtimes
        (the runtime on the head is not theirs to end); how many were cut."""
        with self._lock:
            live = [c for c in self._connections.get(cluster.name, []) if c.proc.poll() is None]
        for conn in live:
            try:
                os.killpg(conn.proc.pid, 9)
            except ProcessLookupError:
                pass
        return len(live)

    # -- health ------------------------------------------------------------------------
    def _refresh(self, cluster: ClusterHandle) -> HealthCheck:
        """Ask SkyPilot, with a forced refresh: a record that is gone (or stopped) is a lost
        cluster; one that is not UP, or a refresh that fails, is a check that failed
        (``sky_health``). On Slurm the allocation's state is asked first (squeue on the login
        node): right after an scancel SkyPilot may still say UP for a few seconds."""
        sky = import_sky()
        sky_name = cluster.info["sky_cluster"]
        if slurm.allocation_running(cluster.info) is False:
            self._say(f"{sky_name}: gone (its Slurm allocation is no longer running)")
            return self._saw(cluster, Health.GONE, "its Slurm allocation is no longer running")
        try:
            records = self._sdk(
                "sky.status",
                lambda: sky.get(sky.status([sky_name], refresh=sky.StatusRefreshMode.FORCE)),
            )
        except Exception as exc:  # could not tell: a failed check, not a lost cluster
            why = f"{type(exc).__name__}: {first_line(exc)}"
            self._say(f"status of {sky_name}: {why}")
            return self._saw(cluster, Health.NOT_UP, f"sky.status failed: {why}")
        statuses = [status_of(r) for r in records]
        health = sky_health(statuses)
        if health is Health.GONE:
            self._say(f"{sky_name}: gone after a forced refresh ({statuses or 'no record'})")
        elif health is Health.NOT_UP:
            self._say(f"{sky_name}: not UP after a forced refresh ({statuses})")
        return self._saw(cluster, health, f"sky.status: {statuses or 'no record'}")

    def _saw(self, cluster: ClusterHandle, health: Health, detail: str) -> HealthCheck:
        check = HealthCheck(health, time.time(), detail)
        with self._lock:
            self._health[cluster.name] = check
        return check

    def _watch(self, cluster: ClusterHandle) -> None:
        with self._lock:
            if cluster.name in self._pollers:
                return
            stop = threading.Event()
            self._pollers[cluster.name] = stop

        def loop() -> None:
            while not stop.wait(HEALTH_INTERVAL_S):
                if self._refresh(cluster).health is Health.GONE:
                    return

        threading.Thread(target=loop, name=f"sky-health-{cluster.name}", daemon=True).start()

    def health(self, cluster: ClusterHandle) -> HealthCheck:
        """The last answer of SkyPilot's forced refresh (refreshed in the background, and
        at once when the runtime's ssh fails), with the time it was asked; never blocks
        the controller's watch loop."""
        with self._lock:
            seen = self._health.get(cluster.name)
        return self._refresh(cluster) if seen is None else seen

    def processes(self, cluster: ClusterHandle) -> list[int]:
        """The local ends of the cluster: the ssh processes running its runtime."""
        import psutil

        return [pid for pid in cluster.info.get("runtime_pids", []) if psutil.pid_exists(pid)]

    # -- nodes -------------------------------------------------------------------------
    def nodes(self, cluster: ClusterHandle) -> list[NodeCheck]:
        """[]: SkyPilot answers for a cluster as a whole (``sky.status``), and asking each
        node over ssh would take seconds a node; the runtime sees a lost node through
        Ray Train (its worker group fails) and the cluster's loss through ``health``."""
        return []

    def node_processes(self, cluster: ClusterHandle, index: int) -> list[int]:
        """[]: a node's processes are on its own machine, never this one's to signal."""
        return []

    def drop_node(self, cluster: ClusterHandle, index: int) -> None:
        """Nothing: a node SkyPilot cannot tell apart (``nodes`` is []) is never reported
        lost, and the cluster's teardown takes all of them."""

    def replace_node(self, cluster: ClusterHandle, index: int, timeout_s: float) -> None:
        """Always ProvisionError(NO_CAPACITY): SkyPilot launches and tears down whole
        clusters and has no call that adds one node to a running one, so a lost node is
        not replaced in place; the run goes on with the workers that fit
        (trainer.min_workers) or fails over to another region."""
        raise ProvisionError(
            ProvisionErrorKind.NO_CAPACITY,
            cluster.region,
            f"node {index} of {cluster.info.get('sky_cluster', cluster.name)} cannot be replaced: SkyPilot "
            "launches and tears down whole clusters, not one node of a running one; the run goes on with the "
            "workers that fit (trainer.min_workers) or fails over",
        )

    # -- logs ------------------------------------------------------------------------------
    def keep_logs(self, cluster: ClusterHandle, dest_dir: str) -> KeptLogs:
        """Each node's rank logs, written to ``dest_dir`` (``logs.fetch_kept``). A cluster
        SkyPilot last saw gone is not asked: its nodes, and the logs on their disks, went with it."""
        log_dir = cluster.info.get("log_dir")
        if not log_dir or "sky_cluster" not in cluster.info:
            return KeptLogs(error=f"cluster {cluster.name} has no log folder (started by an older version)")
        with self._lock:
            seen = self._health.get(cluster.name)
        if seen is not None and seen.health is Health.GONE:
            return KeptLogs(error=f"cluster {cluster.name} was lost; its nodes' logs went with it")
        return fetch_kept(cluster, str(log_dir), dest_dir)

    # -- teardown --------------------------------------------------------------------------
    def teardown(self, cluster: ClusterHandle, keep_runtime: bool = False) -> bool:
        """``keep_runtime``: on Slurm, leave what SkyPilot keeps per cluster name on the
        shared folders (the per-cluster home with its runtime, and skylet's folder): a lost
        allocation leaves them, and a launch under the same name reuses them instead of
        installing again. Our node folder goes either way. True when they were left (the
        run's end removes them: ``sweep_runtime``)."""
        with self._lock:
            stop = self._pollers.pop(cluster.name, None)
        if stop is not None:
            stop.set()
        for pid in cluster.info.get("runtime_pids", []):
            try:
                os.killpg(pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
        sky = import_sky()
        from sky import exceptions as e

        sky_name = cluster.info.get("sky_cluster") or sky_cluster_name(cluster.name)
        self._say(f"tearing down {sky_name}")
        try:
            self._sdk("sky.down", lambda: sky.stream_and_get(sky.down(sky_name), output_stream=Prefixed(self.out)))
        except (e.ClusterDoesNotExist, ValueError) as exc:
            if "does not exist" not in str(exc) and not isinstance(exc, e.ClusterDoesNotExist):
                raise
        kept = keep_runtime and slurm.on_slurm(cluster.info)
        slurm.sweep(cluster.info, self._say, runtime=not kept)
        with self._lock:
            self._health[cluster.name] = HealthCheck(Health.GONE, time.time(), "torn down")
            self._connections.pop(cluster.name, None)
        self._tokens.pop(cluster.name, None)
        self._forget(cluster.name)
        return kept

    def in_use(self, cluster_name: str) -> bool:
        """Does SkyPilot (or this provider's records) still know a cluster of this name? A
        launch under it would adopt what runs there: the name is not free."""
        if self.find(cluster_name) is not None:
            return True
        sky = import_sky()
        sky_name = sky_cluster_name(cluster_name)
        try:
            records = self._sdk("sky.status", lambda: sky.get(sky.status([sky_name])))
        except Exception as exc:  # cannot tell: the name is not known to be free
            self._say(f"status of {sky_name}: {type(exc).__name__}: {first_line(exc)}")
            return True
        return bool(records)

    def sweep_runtime(self, cluster: ClusterHandle) -> None:
        """What a torn-down cluster kept of its runtime (``teardown(keep_runtime=True)``)."""
        slurm.sweep(cluster.info, self._say)
