"""The SkyPilot provider: Ray clusters on AWS, GCP, Kubernetes and on-prem Slurm through SkyPilot's SDK.

A region's cluster is one SkyPilot cluster running one long job, the task built by
:func:`task_config`: its set-up installs the project on the nodes, its run command starts
Ray (the head on rank 0, the other nodes joining it) and then stays up until ``sky.down``.
The runtime driver is started on the head through the SSH configuration SkyPilot writes
for the cluster, detached from that ssh session (its own session, its log and exit status
in files on the node), which then follows it: the runtime's exit status comes back as the
local ``ssh``'s, and a lost session is re-attached by a new ssh that follows it again.

SkyPilot is imported lazily: ``cloud=local`` needs none of it. Every SDK call goes through
:meth:`SkyPilotProvider._sdk`, the one place where transient SkyPilot errors are retried;
provisioning errors are classified (:func:`classify`) for the failure policy.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from secrets import token_hex
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.wire import logfiles
from orchestrator.wire.logfiles import KeptLogs
from providers.base import (
    ClusterHandle,
    Health,
    HealthCheck,
    NodeCheck,
    ProvisionError,
    ProvisionErrorKind,
    RegionSpec,
    RuntimeProcess,
)
from recovery.fsio import write_private
from recovery.retry import Backoff, Deadline, retrying
from recovery.signing import cluster_token

if TYPE_CHECKING:
    from orchestrator.config.schema import RegionConfig, TrainerConfig

T = TypeVar("T")

INSTALL_HINT = (
    "the SkyPilot provider needs SkyPilot: pip install -c constraints.txt -e '.[aws]' for AWS, "
    "'.[gcp]' for GCP, '.[skypilot]' for Slurm or Kubernetes"
)
# infra prefixes SkyPilot takes, and the cloud each stands for (sky.clouds class names).
INFRA_CLOUDS = {"aws": "AWS", "gcp": "GCP", "slurm": "Slurm", "k8s": "Kubernetes", "kubernetes": "Kubernetes"}
# The project on the nodes: SkyPilot syncs the workdir to ~/sky_workdir.
REMOTE_WORKDIR = "~/sky_workdir"
# The user's own code (job.code_dir) on the nodes: synced here as a file mount, its
# requirements.txt installed by the set-up, first on PYTHONPATH of Ray and the runtime.
REMOTE_CODE_DIR = "~/sky_code"
# Set-up lines for job.code_dir, after the region's own set-up: its requirements.txt into
# the runtime's Python, only when the file names something (a file of comments needs no
# pip, which a shared read-only environment such as on-prem's may not have).
CODE_SETUP = r"""req=$(eval echo "$ORCH_CODE_DIR")/requirements.txt
if [ -f "$req" ] && grep -qvE '^[[:space:]]*(#|$)' "$req"; then
  "$(eval echo "$ORCH_PYTHON")" -m pip install -q -r "$req"
fi"""
# Shell that puts $ORCH_CODE_DIR (a "~/..." path, expanded on the node) first on PYTHONPATH.
CODE_PATH = (
    'if [ -n "${ORCH_CODE_DIR:-}" ]; then '
    'export PYTHONPATH="$(eval echo "$ORCH_CODE_DIR")${PYTHONPATH:+:$PYTHONPATH}"; fi'
)
DEFAULT_PYTHON = "~/orch-venv/bin/python"
# The project's extra (pyproject.toml) whose filesystem a store of this scheme needs on
# the nodes: the runtime commits to it and reads its replicas from there.
STORE_EXTRAS = {"s3://": "s3", "gs://": "gcs", "gcs://": "gcs"}


def node_extras(store_urls: Iterable[str]) -> tuple[str, ...]:
    """The extras a node's venv needs for the run's stores and control store."""
    urls = [u for u in store_urls if u]
    return tuple(sorted({extra for scheme, extra in STORE_EXTRAS.items() if any(u.startswith(scheme) for u in urls)}))


def default_setup(extras: Iterable[str] = ()) -> str:
    """A venv from the project's pins, with the extras the stores need. torch is pinned
    without a local label (no ``+cpu``), so each node gets its index's build of it: CUDA
    on a GPU machine from the default index."""
    names = ",".join(extras)
    target = f"'.[{names}]'" if names else "."
    return f"set -e; python3 -m venv ~/orch-venv; ~/orch-venv/bin/pip install -q -c constraints.txt {target}"


# Environment variables that are credentials: passed as SkyPilot secrets, never as envs.
SECRET_ENV = re.compile(r"(SECRET|TOKEN|PASSWORD|CREDENTIAL|ACCESS_KEY|PRIVATE_KEY)", re.IGNORECASE)
# Store credentials of the controller's environment the runtime needs on the nodes, by the
# URL scheme of the stores that need them: only a run with an s3:// store (or control
# store) sends AWS keys to its clusters. Nodes reach gs:// with their own service account.
FORWARDED_SECRETS = {"s3://": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
SDK_ATTEMPTS = 3
SDK_BACKOFF_S = 2.0
# How often a cluster's health is asked of SkyPilot (a forced refresh takes seconds).
HEALTH_INTERVAL_S = 15.0
# Fetching a node's logs before teardown: an unreachable node is given up on quickly
# (the teardown waits for it), a reachable one has time to send its capped files.
LOGS_CONNECT_S = 10
LOGS_TIMEOUT_S = 120.0

# How long the head waits for every node of a multi-node cluster to join its Ray (and a
# worker node for the head to answer) before it gives up with a line saying which joined.
NODE_JOIN_TIMEOUT_S = 120.0
# launch() waits this long for the head's ray-ready: its Ray, then every node's.
READY_TIMEOUT_S = NODE_JOIN_TIMEOUT_S + 60.0

# The task's run command: Ray on every node, then stay up until sky down. The head
# writes $ORCH_NODE_DIR/ray-ready once every node has joined (launch() waits for it), or
# $ORCH_NODE_DIR/ray-failed with the reason. What a real cluster alone knows comes from
# the environment: SkyPilot's SKYPILOT_NODE_RANK / _NODE_IPS / _NUM_NODES, and
# ORCH_RAY_NODE_ARGS (more `ray start` flags; tests running several nodes on one machine
# give each its own ports) and ORCH_NODE_JOIN_S.
RUN_SCRIPT = r"""set -euo pipefail
mkdir -p "$ORCH_NODE_DIR/scratch"
rm -f "$ORCH_NODE_DIR/ray-ready" "$ORCH_NODE_DIR/ray-failed"
# Token auth: RAY_AUTH_TOKEN is the cluster's own, a SkyPilot secret (never in the task's
# envs), on every node: the workers join the head with it.
export RAY_AUTH_MODE=token RAY_USAGE_STATS_ENABLED=0 RAY_TMPDIR="$ORCH_NODE_DIR"
nodes=${SKYPILOT_NUM_NODES:-1}
rank=${SKYPILOT_NODE_RANK:-0}
if [ "$nodes" = 1 ]; then
  # One node: everything on loopback.
  export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
  ip=127.0.0.1; head=127.0.0.1
else
  # SkyPilot's convention: the nodes' IPs one a line in rank order, the head's first.
  ip=$(echo "$SKYPILOT_NODE_IPS" | sed -n "$((rank + 1))p")
  head=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
fi
py=$(eval echo "$ORCH_PYTHON")
join_s=${ORCH_NODE_JOIN_S:-__JOIN_S__}
# job.code_dir: Ray's workers inherit the raylet's environment, so the user's code is
# importable in every worker.
__CODE_PATH__
common=(--node-ip-address="$ip" --num-cpus="$ORCH_NUM_CPUS" --num-gpus="${SKYPILOT_NUM_GPUS_PER_NODE:-0}"
        --disable-usage-stats)
if [ -n "${ORCH_RAY_NODE_ARGS:-}" ]; then
  read -r -a more <<< "$ORCH_RAY_NODE_ARGS"
  common+=("${more[@]}")
fi
if [ "$rank" = 0 ]; then
  dashboard=(--include-dashboard=false)
  if [ -n "${ORCH_DASHBOARD_PORT:-}" ]; then
    # cloud.dashboard: on the head's loopback only (ssh -L reaches it), and the cluster's
    # token, which the dashboard asks for, where the node's user alone reads it.
    dashboard=(--include-dashboard=true --dashboard-host=127.0.0.1 --dashboard-port="$ORCH_DASHBOARD_PORT")
    (umask 077; printf '%s' "${RAY_AUTH_TOKEN:-}" > "$ORCH_NODE_DIR/auth_token")
  fi
  "$py" -m ray.scripts.scripts start --head --port="$ORCH_RAY_PORT" "${dashboard[@]}" \
    --temp-dir="$ORCH_NODE_DIR/ray" "${common[@]}"
  if [ "$nodes" != 1 ]; then
    # Every node in before the runtime starts: a worker group placed on part of the
    # cluster would be a smaller run than the one asked for.
    "$py" -m providers.skypilot.nodes wait "$head:$ORCH_RAY_PORT" "$nodes" "$join_s" \
      --failed="$ORCH_NODE_DIR/ray-failed" --key="cloud.regions.${ORCH_REGION:-<name>}.nodes"
  fi
  touch "$ORCH_NODE_DIR/ray-ready"
else
  # As SkyPilot's own Ray template: wait for the head to answer, then join it.
  "$py" -m providers.skypilot.nodes wait "$head:$ORCH_RAY_PORT" 1 "$join_s"
  # --block: this node's Ray lives as long as this command (sky down ends it with the
  # job). When it ends (a Ray process of the node died), the command stays: a node's
  # command that fails fails SkyPilot's job, which cancels every node's, the head's
  # included; the run's runtime sees the node gone and goes on with the workers that fit.
  status=0
  "$py" -m ray.scripts.scripts start --address="$head:$ORCH_RAY_PORT" --block "${common[@]}" || status=$?
  echo "orchestrator: Ray on node $rank ($ip) ended with status $status; it stays out of the cluster" >&2
fi
exec sleep infinity
""".replace("__CODE_PATH__", CODE_PATH).replace("__JOIN_S__", f"{NODE_JOIN_TIMEOUT_S:g}")


class SkyPilotMissing(ImportError):
    pass


def _sky() -> Any:
    try:
        import sky
    except ImportError as exc:
        raise SkyPilotMissing(f"{INSTALL_HINT} ({exc})") from None
    return sky


# --- configuration ------------------------------------------------------------------


def validate_region(name: str, rc: RegionConfig, trainer: TrainerConfig | None) -> None:
    """Checks of a SkyPilot region that need no SkyPilot; ConfigError names the key.
    ``trainer``: the run's, for a region the run may use (None: one it will not)."""
    from orchestrator.errors import ConfigError

    key = f"cloud.regions.{name}"
    prefix = rc.infra.split("/", 1)[0].lower()
    if not rc.infra or prefix not in INFRA_CLOUDS:
        raise ConfigError(
            f"{key}.infra",
            f"got {rc.infra!r}; expected <cloud>/<region> with cloud one of {', '.join(INFRA_CLOUDS)}, "
            "e.g. aws/us-east-1, gcp/us-central1, slurm/<cluster in ~/.slurm/config>, k8s/<context>",
        )
    if rc.num_nodes < 1:
        raise ConfigError(f"{key}.num_nodes", f"got {rc.num_nodes}; expected an integer >= 1")
    if rc.disk_size < 0:
        raise ConfigError(f"{key}.disk_size", f"got {rc.disk_size}; expected GB >= 0 (0: SkyPilot's default)")
    if rc.accelerators and not re.fullmatch(r"[A-Za-z0-9_.-]+(:\d+(\.\d+)?)?", rc.accelerators):
        raise ConfigError(f"{key}.accelerators", f"got {rc.accelerators!r}; expected NAME or NAME:COUNT, e.g. A10G:1")
    if trainer is not None and trainer.gpus_per_worker > 0 and not rc.accelerators:
        raise ConfigError(
            f"{key}.accelerators",
            f"trainer.gpus_per_worker={trainer.gpus_per_worker:g} needs GPUs on the nodes; set the "
            "region's accelerators (e.g. A10G:1) or trainer.gpus_per_worker=0",
        )


def cloud_of(rc: RegionConfig) -> str:
    """The sky.clouds class name of a region ("AWS", "GCP", "Slurm", "Kubernetes")."""
    return INFRA_CLOUDS[rc.infra.split("/", 1)[0].lower()]


def resources_config(rc: RegionConfig) -> dict[str, Any]:
    """The task's ``resources:`` for a region, in SkyPilot's YAML schema."""
    out: dict[str, Any] = {"infra": rc.infra}
    for key in ("instance_type", "cpus", "memory", "accelerators"):
        value = getattr(rc, key)
        if value:
            out[key] = str(value)
    if rc.use_spot:
        out["use_spot"] = True
    if rc.disk_size:
        out["disk_size"] = rc.disk_size
    return out


def sky_cluster_name(cluster_name: str) -> str:
    """A SkyPilot cluster name for ours: letters, digits and '-', starting with a letter."""
    name = re.sub(r"[^a-z0-9-]+", "-", cluster_name.lower()).strip("-")
    return name if name[:1].isalpha() else f"c-{name}"


def node_dir(cluster_name: str) -> str:
    """The node-local folder of a cluster (Ray's temp dir, Ray Train's storage, scratch);
    short, since Ray's unix socket paths live under it."""
    return "/tmp/osky-" + hashlib.sha256(cluster_name.encode()).hexdigest()[:10]


def forwarded_secrets(store_urls: Iterable[str]) -> tuple[str, ...]:
    """The controller's credential variables the run's stores need on the nodes."""
    urls = [u for u in store_urls if u]
    needed = [names for scheme, names in FORWARDED_SECRETS.items() if any(u.startswith(scheme) for u in urls)]
    return tuple(name for names in needed for name in names)


NOT_OURS = 3
RAY_TOKEN_ENV = "RAY_AUTH_TOKEN"


def kill_script(pid: int, node_dir: str) -> str:
    """The shell on the head that SIGKILLs ``pid`` only if it is one of this cluster's
    Ray processes: they all carry RAY_TMPDIR=<the cluster's node dir> (RUN_SCRIPT sets it
    before ``ray start``; workers inherit the raylet's environment). Exit NOT_OURS else."""
    wanted = shlex.quote(f"RAY_TMPDIR={node_dir}")
    return (
        f"p={int(pid)}; tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qxF {wanted} "
        f"|| exit {NOT_OURS}; kill -9 $p"
    )


# The head's probe when its run command wrote ray-failed (some nodes never joined).
NODES_MISSING = 4


def ready_probe(node_dir: str) -> str:
    """The shell on the head that exits 0 once ray-ready is there, NODES_MISSING with the
    head's line when ray-failed is (RUN_SCRIPT), 1 while neither is."""
    ready, failed = shlex.quote(f"{node_dir}/ray-ready"), shlex.quote(f"{node_dir}/ray-failed")
    return f"test -f {ready} && exit 0; test -f {failed} && {{ cat {failed}; exit {NODES_MISSING}; }}; exit 1"


# The follower's status when the runtime has ended without leaving its status (killed
# together with the shell that waits for it); ssh's own when it fails or loses the head.
RUNTIME_GONE = 98
SSH_FAILED = 255


def runtime_files(remote_spec: str) -> tuple[str, str, str]:
    """(pid file, status file, log) of the runtime started with ``remote_spec``, on the head."""
    stem = remote_spec.removesuffix(".json")
    return f"{stem}.pid", f"{stem}.status", f"{stem}.log"


def start_script(command: str, remote_spec: str) -> str:
    """The shell on the head that starts the runtime (``command``) so that it outlives the
    connection starting it: under a shell in a session of its own that waits for it, its
    output to a log on the node, its pid and then its exit status to files there; then
    this connection follows it (``follow_script``) from the log's start."""
    pid, status, log = (shlex.quote(p) for p in runtime_files(remote_spec))
    waiter = (
        f"{command} < /dev/null >> {log} 2>&1 & echo $! > {pid}.tmp; mv {pid}.tmp {pid}; "
        f"wait $!; echo $? > {status}.tmp; mv {status}.tmp {status}"
    )
    start = f": >> {log}; setsid -w bash -c {shlex.quote(waiter)} < /dev/null > /dev/null 2>&1 & "
    return start + follow_script(remote_spec, from_start=True)


def follow_script(remote_spec: str, from_start: bool = False) -> str:
    """The shell on the head that follows the runtime started with ``remote_spec``: its
    log streamed (from the start, or from now on for a connection re-attached) until it
    ends, then its exit status as this shell's; RUNTIME_GONE when it left none. The
    runtime's own pid is followed: its waiting shell reaps it at once."""
    pid, status, log = (shlex.quote(p) for p in runtime_files(remote_spec))
    return (
        f"set +e; for _ in $(seq 30); do [ -s {pid} ] && break; sleep 0.1; done; "
        f"p=$(cat {pid} 2>/dev/null) || exit {RUNTIME_GONE}; "
        f'tail -n {"+1" if from_start else "0"} -s 0.5 --pid="$p" -f {log}; '
        f'for _ in $(seq 10); do [ -s {status} ] && exit "$(cat {status})"; sleep 0.1; done; '
        f"exit {RUNTIME_GONE}"
    )


def runtime_status(code: int) -> int:
    """The runtime's status from its follower's: a signal's 128+N (the waiting shell's
    way of saying it) as -N, the way the local provider reports it."""
    return -(code - 128) if 128 < code <= 128 + 64 else code


def sky_health(statuses: list[str]) -> Health:
    """SkyPilot's statuses of a cluster after a forced refresh: no record, or a stopped
    cluster, is gone for sure; INIT (a node or Ray not answering) may pass."""
    if any(s == "UP" for s in statuses):
        return Health.UP
    if not statuses or all(s == "STOPPED" for s in statuses):
        return Health.GONE
    return Health.NOT_UP


def split_secrets(env: dict[str, str], forward: Iterable[str] = ()) -> tuple[dict[str, str], dict[str, str]]:
    """(envs, secrets): credentials go to SkyPilot secrets, which SkyPilot never writes
    to its task records or logs; the rest are plain task envs. ``forward``: variables
    of the controller's environment to send too (``forwarded_secrets``)."""
    envs = {k: v for k, v in env.items() if not SECRET_ENV.search(k)}
    secrets = {k: v for k, v in env.items() if SECRET_ENV.search(k)}
    secrets.update({k: os.environ[k] for k in forward if os.environ.get(k)})
    return envs, secrets


def task_config(
    region: str,
    rc: RegionConfig,
    cluster_name: str,
    env: dict[str, str] | None = None,
    *,
    workdir: str,
    ray_port: int = 6390,
    secret_names: tuple[str, ...] = (),
    code_dir: str = "",
    extras: tuple[str, ...] = (),
    dashboard_port: int | None = None,
) -> dict[str, Any]:
    """The SkyPilot task for one region, as the YAML ``sky launch`` takes. Secrets appear
    by name only (null values: ``sky launch --secret NAME`` supplies them). ``code_dir``
    (``job.code_dir``): a folder of this machine synced to ``REMOTE_CODE_DIR`` on every
    node, its requirements installed by the set-up, first on the nodes' PYTHONPATH.
    ``dashboard_port`` (``cloud.dashboard``): the head's Ray dashboard on 127.0.0.1 there."""
    envs = dict(env or {})
    envs.update(
        {
            "ORCH_REGION": region,
            "ORCH_RAY_PORT": str(ray_port),
            "ORCH_NODE_DIR": node_dir(cluster_name),
            "ORCH_NUM_CPUS": str(rc.num_cpus),
            "ORCH_PYTHON": rc.python or DEFAULT_PYTHON,
        }
    )
    if dashboard_port is not None:
        envs["ORCH_DASHBOARD_PORT"] = str(dashboard_port)
    config: dict[str, Any] = {
        "name": sky_cluster_name(cluster_name),
        "workdir": workdir,
        "num_nodes": rc.node_count(),
        "resources": resources_config(rc),
        "envs": envs,
        "setup": rc.setup or default_setup(extras),
        "run": RUN_SCRIPT,
    }
    if code_dir:
        config["file_mounts"] = {REMOTE_CODE_DIR: os.path.abspath(os.path.expanduser(code_dir))}
        envs["ORCH_CODE_DIR"] = REMOTE_CODE_DIR
        config["setup"] = f"{config['setup'].rstrip()}\n{CODE_SETUP}"
    if secret_names:
        config["secrets"] = dict.fromkeys(secret_names)
    return config


def dashboard_info(sky_name: str, port: int, node_dir: str) -> dict[str, str]:
    """What a cluster's info says of its dashboard (cloud.dashboard): the URL on the head's
    loopback, and how to reach it from here (a port forward) with the token it asks for."""
    return {
        "dashboard": f"http://127.0.0.1:{port}",
        "dashboard_access": (
            f"forward it with ssh -N -L {port}:127.0.0.1:{port} {sky_name}, then open http://127.0.0.1:{port}; "
            f"its token: ssh {sky_name} cat {node_dir}/auth_token"
        ),
    }


def stdin_env(env: dict[str, str]) -> dict[str, str]:
    """The runtime's environment entries that must not travel on a command line: the
    run's key and anything named like a credential. A value is one line (hex for the key)."""
    from orchestrator.wire.runkey import ENV as RUN_KEY_ENV

    hidden = {k: v for k, v in env.items() if k == RUN_KEY_ENV or SECRET_ENV.search(k)}
    for k, v in hidden.items():
        if "\n" in v or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise ValueError(f"environment entry {k!r} cannot be passed on stdin")
    return hidden


def build_task(config: dict[str, Any], secrets: dict[str, str] | None = None) -> Any:
    """A sky.Task, validated by SkyPilot's own schema (sky.Task.from_yaml_config)."""
    sky = _sky()
    plain = {k: v for k, v in config.items() if k != "secrets"}
    task = sky.Task.from_yaml_config(plain)
    if secrets:
        task.update_secrets(secrets)
    return task


# --- errors ---------------------------------------------------------------------------


@dataclass
class Classified:
    kind: ProvisionErrorKind
    message: str


def classify(exc: BaseException) -> Classified:
    """SkyPilot's exceptions as the failure policy sees them: no capacity (try the next
    region), precheck (credentials, quota, config: fail fast), transient (retry)."""
    from sky import exceptions as e

    text = first_line(exc)
    name = type(exc).__name__
    if isinstance(exc, e.ResourcesUnavailableError):
        # SkyPilot's own failover history says why each placement was refused.
        history = list(getattr(exc, "failover_history", None) or [])
        if history and all(_is_precheck(h) for h in history):
            cause = history[-1]
            return Classified(ProvisionErrorKind.PRECHECK, f"{type(cause).__name__}: {first_line(cause)}")
        if _mentions_quota(text):
            return Classified(ProvisionErrorKind.PRECHECK, f"quota: {text}")
        return Classified(ProvisionErrorKind.NO_CAPACITY, f"{name}: {text}")
    if _is_precheck(exc):
        return Classified(ProvisionErrorKind.PRECHECK, f"{name}: {text}")
    return Classified(ProvisionErrorKind.TRANSIENT, f"{name}: {text}")


def _is_precheck(exc: BaseException) -> bool:
    from sky import exceptions as e

    precheck = (
        e.InvalidCloudCredentials,
        e.InvalidCloudConfigs,
        e.NoCloudAccessError,
        e.CloudUserIdentityError,
        e.ClusterOwnerIdentityMismatchError,
        e.ProvisionPrechecksError,
        e.ResourcesMismatchError,
        e.InvalidSkyPilotConfigError,
        e.InvalidClusterNameError,
        e.NotSupportedError,
        e.PermissionDeniedError,
        e.UserRequestRejectedByPolicy,
        e.ApiServerAuthenticationError,
        e.APIVersionMismatchError,
    )
    if isinstance(exc, precheck):
        return True
    return _mentions_quota(first_line(exc))


def _mentions_quota(text: str) -> bool:
    return bool(re.search(r"\bquota\b|QuotaExceeded|VcpuLimitExceeded", text, re.IGNORECASE))


def _retryable(exc: BaseException) -> bool:
    """Errors of the SDK call itself (the local API server, the network), not of the cloud."""
    from sky import exceptions as e

    return isinstance(
        exc,
        (e.ApiServerConnectionError, e.NetworkError, e.ClusterStatusFetchingError, e.RequestAlreadyExistsError),
    ) or isinstance(exc, (ConnectionError, TimeoutError))


def first_line(exc: BaseException) -> str:
    """An exception's first line without SkyPilot's colour codes (plan shows the optimizer's, too)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


# --- credentials before anything launches ------------------------------------------------


def precheck(regions: dict[str, RegionConfig]) -> None:
    """Every cloud the candidate regions use has credentials, checked by SkyPilot's own
    cloud classes on this machine (no API server, nothing launched). ProvisionError(PRECHECK)
    names the region, the cloud, what is missing and SkyPilot's hint."""
    _sky()
    from sky import clouds

    checked: dict[str, tuple[bool, str | None]] = {}
    for name, rc in regions.items():
        cloud = cloud_of(rc)
        if cloud not in checked:
            cls = getattr(clouds, cloud)
            try:
                ok, reason = cls.check_credentials(clouds.CloudCapability.COMPUTE)
            except Exception as exc:  # a broken SDK install is a reason not to launch
                ok, reason = False, f"{type(exc).__name__}: {first_line(exc)}"
            checked[cloud] = (bool(ok), _reason_text(reason))
        ok, reason = checked[cloud]
        if not ok:
            raise ProvisionError(
                ProvisionErrorKind.PRECHECK,
                name,
                f"SkyPilot cannot use {cloud} ({rc.infra}): {reason}",
            )


def _reason_text(reason: Any) -> str:
    if isinstance(reason, dict):  # per capability
        reason = "; ".join(str(v) for v in reason.values() if v)
    text = " ".join(str(reason or "no reason given").split())
    return text[:600]


# --- the runtime's process: ssh to the head ---------------------------------------------


class SshRuntime:
    """The runtime driver on the head node, seen through the local ssh that follows it
    (``start_script``, ``follow_script``): its exit status is the runtime's, unless the
    ssh itself failed or was killed (``connection_failed``), which says nothing of the
    runtime: the controller re-attaches (``SkyPilotProvider.reattach``).

    When ssh ends with an error, poll() first asks SkyPilot (forced refresh) whether the
    cluster is still there, so the controller hears "cluster lost" rather than "driver
    lost on a healthy cluster" after an allocation is cancelled."""

    def __init__(
        self, proc: subprocess.Popen[bytes], on_error: Callable[[], object], remote_spec: str, log_path: str
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.remote_spec = remote_spec
        self.log_path = log_path
        self._on_error = on_error
        self._checked = False

    @property
    def connection_failed(self) -> bool:
        code = self.proc.returncode
        return code is not None and (code < 0 or code == SSH_FAILED)

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is None:
            return None
        if code != 0 and not self._checked:
            self._checked = True
            self._on_error()
        return code if self.connection_failed else runtime_status(code)


# --- the provider ---------------------------------------------------------------------


class SkyPilotProvider:
    name = "skypilot"
    # processes() are the local ssh ends; the runtime's pids are the remote nodes': a pid
    # it names must never be signalled here (chaos kill_worker goes through kill_worker).
    local_processes = False

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
        def guarded() -> T:
            # SkyPilot's print_exception_no_traceback sets sys.tracebacklimit to 0 and never
            # restores it when an exception passes: every later traceback in this process
            # (the controller's, a user's) would shrink to its last line.
            limit = getattr(sys, "tracebacklimit", None)
            try:
                return call()
            finally:
                if limit is None:
                    sys.__dict__.pop("tracebacklimit", None)
                else:
                    sys.tracebacklimit = limit

        return retrying(
            guarded,
            attempts=SDK_ATTEMPTS,
            backoff=Backoff(SDK_BACKOFF_S),
            retryable=_retryable,
            on_retry=lambda _n, exc, delay: self._say(
                f"{what}: {type(exc).__name__}: {first_line(exc)}; retrying in {delay:g}s"
            ),
        )

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
        self, region: str, cluster_name: str, env: dict[str, str] | None = None
    ) -> tuple[dict[str, Any], dict[str, str]]:
        rc = self.regions[region]
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
        sky = _sky()
        # The cluster's Ray token: to its nodes as a SkyPilot secret, to the runtime over
        # ssh's stdin. Derived from the run's secret when the controller gave its key (a
        # resumed controller derives it again); random otherwise (held in this process only).
        token = self._token(cluster_name) or token_hex(32)
        config, secrets = self.task_for(region.name, cluster_name, {**(env or {}), RAY_TOKEN_ENV: token})
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
            handle.info["name_on_cloud"] = _name_on_cloud(sky_name)
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
                result["value"] = sky.stream_and_get(request_id, output_stream=_Prefixed(self.out))
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
        probe_cmd = ready_probe(handle.info["node_dir"])
        while not deadline.expired:
            probe = self._ssh(handle, self._remote(handle, probe_cmd), check=False, timeout_s=30)
            if probe.returncode == 0:
                return
            if probe.returncode == NODES_MISSING:
                why = (probe.stdout.strip().splitlines() or ["the nodes did not all join"])[-1]
                raise ProvisionError(ProvisionErrorKind.TIMEOUT, handle.region, why)
            time.sleep(1.0)
        nodes = int(handle.info.get("num_nodes", 1))
        what = "Ray did not start on the head"
        if nodes > 1:
            what += f" and its {nodes - 1} other node(s)"
        raise ProvisionError(ProvisionErrorKind.TIMEOUT, handle.region, f"{what} within {wait_s:g}s")

    # -- ssh to the head ------------------------------------------------------------------
    def _remote(self, handle: ClusterHandle, command: str, node: int = 0) -> str:
        """``command`` as it must run to be on the head (or node ``node`` of the cluster),
        in the project's synced copy.

        A cloud VM is what ssh reaches. On Slurm, ssh reaches the login node: the command
        goes into the cluster's allocation with ``srun --overlap`` (as SkyPilot's own
        command runner does; ``--relative`` picks the node), with HOME the cluster's folder
        where SkyPilot synced the project; an allocation that is gone ends it with status 97."""
        in_workdir = f"cd {REMOTE_WORKDIR}; {command}"
        name = handle.info.get("name_on_cloud")
        if not str(handle.info.get("infra", "")).startswith("slurm/") or not name:
            return in_workdir
        inner = f'export HOME="$SKY_CLUSTER_HOME"; {in_workdir}'
        return (
            f"name={shlex.quote(name)}; "
            'id=$(squeue -h -u "$(id -un)" --name="$name" -o %i | head -n1); '
            '[ -n "$id" ] || { echo "no Slurm allocation named $name" >&2; exit 97; }; '
            'SKY_CLUSTER_HOME="$HOME/.sky_clusters/$name" '
            f'exec srun --unbuffered --overlap --jobid="$id" --nodes=1 --ntasks=1 '
            f"{f'--relative={int(node)} ' if node else ''}bash -c {shlex.quote(inner)}"
        )

    def _ssh_argv(self, handle: ClusterHandle, command: str, node: int = 0, connect_timeout_s: int = 0) -> list[str]:
        sky_name = handle.info["sky_cluster"]
        config = os.path.expanduser(f"~/.sky/generated/ssh/{sky_name}")
        # SkyPilot's SSH configuration names the head after the cluster, node i > 0
        # <cluster>-worker<i>; on Slurm every node is reached through the login node.
        on_slurm = str(handle.info.get("infra", "")).startswith("slurm/")
        host = sky_name if node == 0 or on_slurm else f"{sky_name}-worker{int(node)}"
        return [
            "ssh",
            "-F",
            config,
            "-o",
            "BatchMode=yes",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
            # A head that does not answer: a re-attach (or a log fetch) gives up in bounded time.
            "-o",
            f"ConnectTimeout={int(connect_timeout_s) or 20}",
            host,
            f"bash --login -c {shlex.quote(command)}",
        ]

    def kill_worker(self, cluster: ClusterHandle, pid: int) -> str | None:
        """SIGKILL ``pid`` on the cluster's head if it is one of the cluster's Ray
        processes there; why not, or None once killed (chaos kill_worker)."""
        try:
            done = self._ssh(cluster, self._remote(cluster, kill_script(pid, cluster.info["node_dir"])), check=False)
        except (OSError, subprocess.SubprocessError, KeyError) as exc:
            return f"cannot reach the head of {cluster.name}: {exc}"
        if done.returncode == 0:
            return None
        if done.returncode == NOT_OURS:
            return f"pid {pid} is not a process of cluster {cluster.name} on its head"
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"cannot signal pid {pid} on the head of {cluster.name}: ssh exited {done.returncode}: {tail}"

    def _ssh(
        self, handle: ClusterHandle, command: str, check: bool = True, timeout_s: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._ssh_argv(handle, command),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=check,
            stdin=subprocess.DEVNULL,
        )

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
                self._ssh_argv(cluster, self._remote(cluster, command)),
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
                self._ssh_argv(cluster, self._remote(cluster, follow_script(proc.remote_spec))),
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
        sky = _sky()
        sky_name = cluster.info["sky_cluster"]
        if self._allocation_running(cluster) is False:
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
        statuses = [_status_of(r) for r in records]
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

    def _allocation_running(self, cluster: ClusterHandle) -> bool | None:
        """On Slurm: is the cluster's allocation RUNNING? None when not Slurm or unknown."""
        infra = str(cluster.info.get("infra", ""))
        name = cluster.info.get("name_on_cloud")
        if not infra.startswith("slurm/") or not name:
            return None
        argv = [
            "ssh",
            "-F",
            os.path.expanduser("~/.slurm/config"),
            "-o",
            "BatchMode=yes",
            infra.split("/", 1)[1],
            f'squeue -h -u "$(id -un)" --name={shlex.quote(str(name))} -t RUNNING -o %i',
        ]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode != 0:
            return None
        return bool(out.stdout.strip())

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
        """Each node's rank logs, packed and capped on the node (``python -m
        orchestrator.wire.logfiles pack``) and streamed back over ssh, written to
        ``dest_dir``. A cluster SkyPilot last saw gone is not asked: its nodes, and the
        logs on their disks, went with it."""
        log_dir = cluster.info.get("log_dir")
        if not log_dir or "sky_cluster" not in cluster.info:
            return KeptLogs(error=f"cluster {cluster.name} has no log folder (started by an older version)")
        with self._lock:
            seen = self._health.get(cluster.name)
        if seen is not None and seen.health is Health.GONE:
            return KeptLogs(error=f"cluster {cluster.name} was lost; its nodes' logs went with it")
        parts: dict[int, list[bytes]] = {}
        problems: list[str] = []
        cut = 0
        for node in range(max(1, int(cluster.info.get("num_nodes", 1)))):
            try:
                fetched = self._fetch_logs(cluster, str(log_dir), node)
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                problems.append(f"node {node}: {first_line(exc)}")
                continue
            for rank, (data, cut_on_node) in fetched.items():
                parts.setdefault(rank, []).append(data)
                cut += cut_on_node
        # A rank Ray Train restarted on another node wrote on both: its parts in node
        # order, capped as one log when together they are over the cap.
        files: dict[int, bytes] = {}
        for rank, pieces in parts.items():
            files[rank], cut_here = logfiles.capped(b"".join(pieces)) if len(pieces) > 1 else (pieces[0], 0)
            cut += cut_here
        kept = logfiles.write_kept(dest_dir, files, cut)
        if problems:
            return KeptLogs(kept.ranks, kept.bytes, kept.cut, error="; ".join(problems)[:500])
        return kept

    def _fetch_logs(self, cluster: ClusterHandle, log_dir: str, node: int) -> dict[int, bytes]:
        python = cluster.info.get("python", DEFAULT_PYTHON)
        command = f"{python} -m orchestrator.wire.logfiles pack {shlex.quote(log_dir)}"
        done = subprocess.run(
            self._ssh_argv(cluster, self._remote(cluster, command, node), node=node, connect_timeout_s=LOGS_CONNECT_S),
            capture_output=True,
            timeout=LOGS_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            tail = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise OSError(f"ssh exited {done.returncode}: {tail[:200]}")
        return logfiles.unpack(done.stdout)

    # -- teardown --------------------------------------------------------------------------
    def teardown(self, cluster: ClusterHandle) -> None:
        with self._lock:
            stop = self._pollers.pop(cluster.name, None)
        if stop is not None:
            stop.set()
        for pid in cluster.info.get("runtime_pids", []):
            try:
                os.killpg(pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
        sky = _sky()
        from sky import exceptions as e

        sky_name = cluster.info.get("sky_cluster") or sky_cluster_name(cluster.name)
        self._say(f"tearing down {sky_name}")
        try:
            self._sdk("sky.down", lambda: sky.stream_and_get(sky.down(sky_name), output_stream=_Prefixed(self.out)))
        except (e.ClusterDoesNotExist, ValueError) as exc:
            if "does not exist" not in str(exc) and not isinstance(exc, e.ClusterDoesNotExist):
                raise
        self._sweep_slurm(cluster)
        with self._lock:
            self._health[cluster.name] = HealthCheck(Health.GONE, time.time(), "torn down")
            self._connections.pop(cluster.name, None)
        self._tokens.pop(cluster.name, None)
        self._forget(cluster.name)

    def _sweep_slurm(self, cluster: ClusterHandle) -> None:
        """What an allocation leaves on a Slurm cluster's shared folders: our node folder,
        and SkyPilot's per-cluster folders, which ``sky.down`` leaves behind when the
        allocation was lost (scancel). Best effort, through the login node."""
        infra = str(cluster.info.get("infra", ""))
        if not infra.startswith("slurm/"):
            return
        paths = [str(cluster.info.get("node_dir", ""))]
        name = cluster.info.get("name_on_cloud")
        if name:
            paths += [f"~/.sky_clusters/{name}", f"/tmp/{name}"]
        paths = [p for p in paths if p and p not in ("/", "~")]
        if not paths:
            return
        login = infra.split("/", 1)[1]
        try:
            subprocess.run(
                [
                    "ssh",
                    "-F",
                    os.path.expanduser("~/.slurm/config"),
                    "-o",
                    "BatchMode=yes",
                    login,
                    "rm -rf " + " ".join(paths),
                ],
                capture_output=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self._say(f"could not clean {', '.join(paths)} on {login}: {exc}")


def _name_on_cloud(sky_name: str) -> str | None:
    """The cluster's name on the cloud (SkyPilot adds a user hash; on Slurm, the job's
    name), from the SSH configuration SkyPilot wrote for it."""
    try:
        with open(os.path.expanduser(f"~/.sky/generated/ssh/{sky_name}"), encoding="utf-8") as fh:
            for line in fh:
                m = re.match(r"\s*SetEnv\s+SKY_CLUSTER_NAME=(\S+)", line)
                if m:
                    return m.group(1)
    except FileNotFoundError:
        pass
    return None


def _status_of(record: Any) -> str:
    status = record["status"] if isinstance(record, dict) else getattr(record, "status", None)
    return str(getattr(status, "value", status))


class _Prefixed:
    """A text stream that prefixes SkyPilot's log lines, so a person sees what it is doing."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self._buf = ""

    def write(self, text: str) -> int:
        self._buf += re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            if line.strip():
                print(f"skypilot: {line.rstrip()}", file=self.out, flush=True)
        return len(text)

    def flush(self) -> None:
        pass
