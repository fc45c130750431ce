"""SkyPilot regions of several nodes, without Ray or a cloud: the task, the run command's
node logic in bash with a fake Python, the head's wait for its nodes (providers.skypilot.nodes),
launch's reading of it, and the Provider's node methods. The same run command with real
Ray nodes is tests/integration/test_skypilot_nodes.py.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from providers.skypilot.nodes import GcsCounter
from providers.skypilot.scripts import NODES_MISSING, RUN_SCRIPT, ready_probe
from providers.skypilot.task import task_config
from tests.support.paths import REPO
from tests.unit.providers.skypilot.test_nodes import _aws

pytestmark = pytest.mark.integration

# Records its arguments, one call a line; fails the call whose arguments match $FAIL_ON.
FAKE_PYTHON = (
    '#!/bin/sh\necho "$*" >> "$(dirname "$0")/calls.txt"\n'
    'case "$*" in *"${FAIL_ON:-@never@}"*) echo "error: no nodes" >&2; exit 1;; esac\n'
)


def _run_script(
    tmp_path: Path, rank: int, nodes: int, fail_on: str = ""
) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    """RUN_SCRIPT as SkyPilot runs it on node ``rank``, with a fake Python and a ``sleep``
    that returns: what it would run, in order."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(FAKE_PYTHON)
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    for f in ("python", "sleep"):
        (bin_dir / f).chmod(0o755)
    node = tmp_path / "node"
    envs = task_config(
        "us-east-1", _aws(f"cloud.regions.us-east-1.nodes={nodes}"), "c", workdir=str(REPO), ray_port=21000
    )["envs"]
    env = {
        **envs,
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ORCH_PYTHON": str(bin_dir / "python"),
        "ORCH_NODE_DIR": str(node),
        "SKYPILOT_NODE_RANK": str(rank),
        "SKYPILOT_NUM_NODES": str(nodes),
        "SKYPILOT_NODE_IPS": "\n".join(f"10.0.0.{i + 1}" for i in range(nodes)),
        "RAY_AUTH_TOKEN": "t0ken",
        "FAIL_ON": fail_on,
    }
    done = subprocess.run(["bash", "-c", RUN_SCRIPT], env=env, capture_output=True, text=True, timeout=30)
    calls = bin_dir / "calls.txt"
    return done, calls.read_text().splitlines() if calls.exists() else [], node


def test_the_head_starts_ray_then_waits_for_every_node_before_it_says_ready(tmp_path: Path) -> None:
    done, calls, node = _run_script(tmp_path, 0, 3)
    assert done.returncode == 0, done.stderr
    start, wait = calls
    assert start.startswith("-m providers.raystart start --no-ray-client --head --port=21000 ")
    assert "--node-ip-address=10.0.0.1 " in start
    assert wait == (
        f"-m providers.skypilot.nodes wait 10.0.0.1:21000 3 120 --failed={node}/ray-failed "
        "--key=cloud.regions.us-east-1.nodes"
    )
    assert (node / "ray-ready").exists()


def test_a_head_whose_nodes_never_join_exits_and_never_says_ready(tmp_path: Path) -> None:
    done, calls, node = _run_script(tmp_path, 0, 2, fail_on="providers.skypilot.nodes wait")
    assert done.returncode == 1 and "error: no nodes" in done.stderr
    assert len(calls) == 2 and not (node / "ray-ready").exists()


def test_a_worker_node_waits_for_the_head_then_joins_it_blocking_with_its_own_ip(tmp_path: Path) -> None:
    done, calls, node = _run_script(tmp_path, 2, 3)
    assert done.returncode == 0, done.stderr
    wait, join = calls
    assert wait == "-m providers.skypilot.nodes wait 10.0.0.1:21000 1 120"
    assert join.startswith(
        "-m providers.raystart start --no-ray-client --address=10.0.0.1:21000 --block --node-ip-address=10.0.0.3 "
    )
    assert "--head" not in join and "--temp-dir" not in join
    assert not (node / "ray-ready").exists(), "only the head says ready"


def test_a_worker_whose_ray_ended_stays_so_skypilot_does_not_cancel_the_head(tmp_path: Path) -> None:
    done, calls, _ = _run_script(tmp_path, 1, 2, fail_on="--block")
    assert done.returncode == 0 and len(calls) == 2
    assert "Ray on node 1 (10.0.0.2) ended with status 1; it stays out of the cluster" in done.stderr


def test_a_worker_that_never_sees_the_head_does_not_start_ray(tmp_path: Path) -> None:
    done, calls, _ = _run_script(tmp_path, 1, 2, fail_on="providers.skypilot.nodes wait")
    assert done.returncode == 1 and len(calls) == 1


def test_one_node_starts_the_head_alone_and_waits_for_none(tmp_path: Path) -> None:
    done, calls, node = _run_script(tmp_path, 0, 1)
    assert done.returncode == 0, done.stderr
    (start,) = calls
    assert "--node-ip-address=127.0.0.1 " in start and (node / "ray-ready").exists()


def test_a_head_that_is_not_listening_is_counted_as_none_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        seen = GcsCounter(f"127.0.0.1:{port}")()
    assert seen.alive == 0 and f"127.0.0.1:{port}" in seen.error


def test_the_ready_probe_answers_ready_missing_nodes_or_not_yet(tmp_path: Path) -> None:
    def probe() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", ready_probe(str(tmp_path))], capture_output=True, text=True, timeout=10)

    assert probe().returncode == 1
    (tmp_path / "ray-failed").write_text("only 1 of 2 Ray nodes joined\n")
    done = probe()
    assert done.returncode == NODES_MISSING and done.stdout == "only 1 of 2 Ray nodes joined\n"
    (tmp_path / "ray-ready").touch()
    assert probe().returncode == 0


def test_the_ready_probe_can_wait_in_one_connection_for_the_file(tmp_path: Path) -> None:
    import threading

    # Not there when the probe starts: it answers ready because it waited.
    threading.Timer(0.5, (tmp_path / "ray-ready").touch).start()
    done = subprocess.run(["bash", "-c", ready_probe(str(tmp_path), wait_s=30)], timeout=60)
    assert done.returncode == 0
    (tmp_path / "ray-ready").unlink()
    assert subprocess.run(["bash", "-c", ready_probe(str(tmp_path), wait_s=0.4)], timeout=20).returncode == 1
