"""The SkyPilot task of a region's cluster, as the YAML ``sky launch`` takes: its resources,
set-up, envs and run command (``scripts.RUN_SCRIPT``), and the names and folders a cluster
gets. Pure: no SkyPilot import (``sdk.build_task`` validates it with SkyPilot's schema)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from providers.skypilot.scripts import CODE_SETUP, RUN_SCRIPT

if TYPE_CHECKING:
    from orchestrator.config.schema import RegionConfig

# The project on the nodes: SkyPilot syncs the workdir to ~/sky_workdir.
REMOTE_WORKDIR = "~/sky_workdir"
# The user's own code (job.code_dir) on the nodes: synced here as a file mount, its
# requirements.txt installed by the set-up, first on PYTHONPATH of Ray and the runtime.
REMOTE_CODE_DIR = "~/sky_code"
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
