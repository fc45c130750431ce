"""The real one-node Slurm cluster for the on-prem tests (.ci/slurm/setup brings it up).

Runs go through SkyPilot's own local API server on a port of the session's, with
SkyPilot told to use the Slurm cloud only; the server is stopped at the end, and nothing
may be left in squeue.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO
from tests.support.runs import wait_for_ci_setup

SETUP = REPO / ".ci" / "slurm" / "setup"
IN_NS = REPO / ".ci" / "slurm" / "in-ns"
NODE_USER = os.environ.get("ORCH_SLURM_USER", "skyuser")
SHARED = Path(os.environ.get("ORCH_ONPREM_SHARED", "/srv/orchestrator"))
SKY_CONFIG = Path("/var/lib/orch-slurm/sky-config.yaml")
# A SkyPilot run here: the API server's start, two launches and teardowns at most.
RUN_TIMEOUT_S = 900
# CI's cloud for this cluster lives beside its set-up, not among the project's configs
# (conf/cloud/onprem.yaml is the template for a user's own cluster).
CLOUD = (f'hydra.searchpath=["file://{REPO / ".ci" / "slurm" / "conf"}"]', "cloud=ci_slurm")


def squeue(state: str | None = None) -> list[tuple[str, str]]:
    """(job id, job name) of the node user's Slurm jobs (``state``: only those in it, e.g. RUNNING)."""
    only = ["-t", state] if state else []
    out = subprocess.run(
        [str(IN_NS), "squeue", "-h", "-u", NODE_USER, *only, "-o", "%i %j"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return [tuple(line.split(None, 1)) for line in out.splitlines() if line.strip()]  # type: ignore[misc]


def scancel(job_id: str) -> None:
    subprocess.run([str(IN_NS), "scancel", job_id], check=True, timeout=30)


@dataclass
class OnPrem:
    home: Path
    env: dict[str, str]

    def squeue(self) -> list[tuple[str, str]]:
        return squeue()

    def scancel(self, job_id: str) -> None:
        scancel(job_id)

    def wait_squeue_empty(self, timeout_s: float = 60.0) -> list[tuple[str, str]]:
        deadline = time.monotonic() + timeout_s
        while True:
            jobs = self.squeue()
            if not jobs or time.monotonic() > deadline:
                return jobs
            time.sleep(1.0)


def slurm_up() -> str | None:
    """None when the cluster is up and SkyPilot can reach it; else why the tests skip."""
    if shutil.which("nsenter") is None or not SETUP.exists():
        return "nsenter or .ci/slurm/setup missing"
    if os.geteuid() != 0:
        return "the Slurm set-up needs root"
    waited = wait_for_ci_setup()
    if waited:
        return waited
    check = subprocess.run(["bash", str(SETUP), "--check"], capture_output=True, timeout=60)
    if check.returncode != 0:
        return "the one-node Slurm cluster is not up: run .ci/slurm/setup (.ci/run does)"
    if not _index_reachable():
        return "the package index is unreachable from the node (SkyPilot installs its runtime there)"
    return None


def _index_reachable() -> bool:
    """A CONNECT through the set-up's proxy to the package index answers 200."""
    import runpy
    import socket

    hosts = sorted(runpy.run_path(str(SETUP.parent / "index_proxy.py"))["allowed_hosts"]())
    if not hosts:
        return False
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(30)
            sock.connect("/run/orch-slurm/proxy.sock")
            sock.sendall(f"CONNECT {hosts[-1]}:443 HTTP/1.1\r\nHost: {hosts[-1]}:443\r\n\r\n".encode())
            return b" 200 " in sock.recv(128)
    except OSError:
        return False


# The folders of sessions in which a test failed, kept for reading.
KEPT: list[Path] = []


def session(tmp_root: Path | None = None, failed: Callable[[], bool] = lambda: False) -> Iterator[OnPrem]:
    """The environment of on-prem runs; on exit, the API server stopped, the squeue empty,
    and its folder removed unless ``failed()``: its runs' journals are what a failure is
    read from, so it is kept and named in the run's summary (``KEPT``)."""
    tag = uuid.uuid4().hex[:8]
    home = SHARED / f"test-{tag}" / "home"
    home.mkdir(parents=True)
    env = {
        **os.environ,
        "ORCHESTRATOR_HOME": str(home),
        "ORCH_ONPREM_SHARED": str(SHARED / f"test-{tag}"),
        "SKYPILOT_GLOBAL_CONFIG": str(SKY_CONFIG),
        "SKYPILOT_API_SERVER_LOCAL_PORT": str(_free_port()),
        "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
    }
    onprem = OnPrem(home=home, env=env)
    try:
        yield onprem
    finally:
        sky = str(Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin" / "sky")
        if not Path(sky).exists():
            sky = "sky"
        subprocess.run([sky, "api", "stop"], env=env, capture_output=True, timeout=120)
        # A safety net only: the tests assert the queue was already empty.
        try:
            for job_id, _ in onprem.squeue():
                onprem.scancel(job_id)
        except (OSError, subprocess.SubprocessError):
            pass  # the cluster itself is gone: nothing can be queued
        if failed():
            KEPT.append(SHARED / f"test-{tag}")
        else:
            shutil.rmtree(SHARED / f"test-{tag}", ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sky_reads_env() -> None:
    """SkyPilot, already imported in this process, reads its environment again: its config
    (SKYPILOT_GLOBAL_CONFIG) and its API server's URL (SKYPILOT_API_SERVER_LOCAL_PORT), which
    it otherwise keeps from its first use."""
    import sys

    if "sky" not in sys.modules:
        return  # read on its first import
    from sky import skypilot_config
    from sky.server import common

    skypilot_config.reload_config()
    common.get_server_url.cache_clear()
