"""A multi-node SkyPilot cluster's Ray, up to the clouds' boundary: the task's run command
(``providers.skypilot.provider.RUN_SCRIPT``) runs here in bash for rank 0 and rank 1, fed what
SkyPilot gives each node (SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS, SKYPILOT_NUM_NODES) with
both nodes at 127.0.0.1, each with its own ports (ORCH_RAY_NODE_ARGS) and node folder as
on two machines. Real Ray, real token auth; nothing of it left afterwards."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from providers.local.nodes import NODE_PORT_FLAGS
from providers.local.provider import free_port
from providers.skypilot.scripts import RUN_SCRIPT
from tests.support.paths import REPO
from tests.support.runs import ray_pids, wait_no_new_ray

# Bounds on waits that a healthy run passes in seconds (never the measure of a test).
UP_S = 90.0
OBJECT_STORE = str(80 * 1024 * 1024)


class Nodes:
    """The node commands of one test, and their teardown: every process that carries one
    of the test's node folders as RAY_TMPDIR (RUN_SCRIPT exports it before Ray starts,
    and Ray's processes inherit it) is this test's, and killed by its pid."""

    def __init__(self) -> None:
        self.port = free_port()
        self.token = os.urandom(32).hex()
        self.dirs: list[str] = []
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, rank: int, nodes: int, join_s: float) -> tuple[subprocess.Popen[str], Path]:
        # Short: Ray's unix sockets live under it.
        node_dir = tempfile.mkdtemp(prefix="osky-t", dir="/tmp")
        self.dirs.append(node_dir)
        ports = [f"{flag}={free_port()}" for flag in NODE_PORT_FLAGS]
        if rank == 0:
            ports.append(f"--ray-client-server-port={free_port()}")
        env = {
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", "/tmp"),
            # What SkyPilot gives each node of a 2-node cluster, both nodes on this machine.
            "SKYPILOT_NODE_RANK": str(rank),
            "SKYPILOT_NUM_NODES": str(nodes),
            "SKYPILOT_NODE_IPS": "\n".join(["127.0.0.1"] * nodes),
            "SKYPILOT_NUM_GPUS_PER_NODE": "0",
            # What the task's envs and secrets give it (providers.skypilot.provider.task_config).
            "RAY_AUTH_TOKEN": self.token,
            "ORCH_REGION": "r2",
            "ORCH_RAY_PORT": str(self.port),
            "ORCH_NODE_DIR": node_dir,
            "ORCH_NUM_CPUS": "1",
            "ORCH_PYTHON": sys.executable,
            "ORCH_NODE_JOIN_S": f"{join_s:g}",
            "ORCH_RAY_NODE_ARGS": " ".join([*ports, f"--object-store-memory={OBJECT_STORE}"]),
        }
        with open(os.path.join(node_dir, "run.log"), "w") as log:
            proc = subprocess.Popen(
                ["bash", "-c", RUN_SCRIPT],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc, Path(node_dir)

    def pids(self) -> list[int]:
        wanted = {f"RAY_TMPDIR={d}" for d in self.dirs}
        found = []
        for p in psutil.process_iter():
            try:
                if wanted & set(f"{k}={v}" for k, v in p.environ().items()):
                    found.append(p.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def teardown(self) -> list[int]:
        """SIGKILL to each node command's group and to every process of the test's nodes
        (the head's Ray daemonized out of its command), until none is left; what still
        runs after that."""
        deadline = time.monotonic() + 20
        while True:
            for proc in self.procs:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for proc in self.procs:
                proc.wait(timeout=10)
            left = [p for p in self.pids() if _alive(p)]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        return left


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def nodes() -> Iterator[Nodes]:
    before = ray_pids()
    n = Nodes()
    try:
        yield n
    finally:
        left = n.teardown()
    assert not left, f"node processes left: {left}"
    assert not wait_no_new_ray(before), "Ray processes left behind"


def _wait_file(path: Path, proc: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + UP_S
    while not path.exists():
        assert proc.poll() is None, f"exited {proc.returncode}: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {path.name} after {UP_S:g}s: {log.read_text()[-3000:]}"
        time.sleep(0.2)


def _alive_nodes(address: str, token: str) -> list[float]:
    """The alive nodes' CPUs, asked of the head's GCS (its own node table, as the
    autoscaler reads it): no driver joins the cluster."""
    code = (
        "import sys; from ray._raylet import GcsClient; from ray.core.generated import gcs_pb2\n"
        "infos = GcsClient(address=sys.argv[1]).get_all_node_info(timeout=10).values()\n"
        "print(sorted(i.resources_total['CPU'] for i in infos if i.state == gcs_pb2.GcsNodeInfo.ALIVE))"
    )
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    done = subprocess.run(
        [sys.executable, "-c", code, address], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return [float(x) for x in done.stdout.strip().strip("[]").split(",") if x.strip()]


def test_rank_0_and_rank_1_make_one_ray_of_two_nodes_and_the_head_is_ready_once_both_are(nodes: Nodes) -> None:
    head, head_dir = nodes.start(0, 2, join_s=UP_S)
    worker, worker_dir = nodes.start(1, 2, join_s=UP_S)
    _wait_file(head_dir / "ray-ready", head, head_dir / "run.log")
    # The head said ready only after its wait saw both nodes: the worker joined by then.
    assert "sky_nodes: 2 Ray node(s) alive" in (head_dir / "run.log").read_text()
    assert _alive_nodes(f"127.0.0.1:{nodes.port}", nodes.token) == [1.0, 1.0]
    assert worker.poll() is None, (worker_dir / "run.log").read_text()[-3000:]
    assert not (head_dir / "ray-failed").exists()
    # The same wait against this real head for a third node that never comes: it gives up
    # past its timeout with one line, written where the provider reads it (the head's
    # script then exits without saying ready: tests/unit/providers/skypilot/test_nodes.py). One
    # cluster for both: a second head costs this suite 12 s.
    failed = head_dir / "wait-failed"
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": nodes.token}
    wait = subprocess.run(
        [
            sys.executable,
            "-m",
            "providers.skypilot.nodes",
            "wait",
            f"127.0.0.1:{nodes.port}",
            "3",
            "2",
            f"--failed={failed}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=UP_S,
    )
    assert wait.returncode == 1, wait.stderr[-2000:]
    assert (
        failed.read_text()
        .strip()
        .startswith(
            f"only 2 of 3 Ray nodes (cloud.regions.<name>.nodes) joined the head at 127.0.0.1:{nodes.port} within 2s"
        )
    )
