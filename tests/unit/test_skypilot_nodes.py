"""SkyPilot regions of several nodes, without Ray or a cloud: the task, the run command's
node logic in bash with a fake Python, the head's wait for its nodes (providers.skypilot.nodes),
launch's reading of it, and the Provider's node methods. The same run command with real
Ray nodes is tests/integration/test_skypilot_nodes.py."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.compose import compose
from providers.base import ClusterHandle, ProvisionError, ProvisionErrorKind, RegionSpec
from providers.skypilot import nodes as sky_nodes
from providers.skypilot.nodes import GcsCounter, NodesMissing, Seen, wait_for_nodes
from providers.skypilot.provider import SkyPilotProvider
from providers.skypilot.scripts import NODES_MISSING, RUN_SCRIPT, ready_probe
from providers.skypilot.sdk import build_task
from providers.skypilot.task import task_config

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
# Records its arguments, one call a line; fails the call whose arguments match $FAIL_ON.
FAKE_PYTHON = (
    '#!/bin/sh\necho "$*" >> "$(dirname "$0")/calls.txt"\n'
    'case "$*" in *"${FAIL_ON:-@never@}"*) echo "error: no nodes" >&2; exit 1;; esac\n'
)


def _aws(*overrides: str) -> Any:
    return compose(["cloud=aws", *overrides]).cloud.regions["us-east-1"]


@pytest.mark.parametrize("key", ["nodes", "num_nodes"])
def test_a_two_node_region_is_a_two_node_task(key: str) -> None:
    rc = _aws(f"cloud.regions.us-east-1.{key}=2")
    config = task_config("us-east-1", rc, "run-us-east-1-g1", workdir=str(REPO), ray_port=21000)
    assert config["num_nodes"] == 2
    assert config["envs"]["ORCH_REGION"] == "us-east-1" and config["envs"]["ORCH_RAY_PORT"] == "21000"
    assert "providers.skypilot.nodes wait" in config["run"] and "--block" in config["run"]
    sky = pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    task = build_task(config)
    assert isinstance(task, sky.Task) and task.num_nodes == 2
    assert task.run == RUN_SCRIPT


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
    assert start.startswith("-m ray.scripts.scripts start --head --port=21000 ")
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
    assert join.startswith("-m ray.scripts.scripts start --address=10.0.0.1:21000 --block --node-ip-address=10.0.0.3 ")
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


# --- the wait (providers.skypilot.nodes) ---------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_the_wait_ends_once_every_node_is_alive() -> None:
    seen = iter([Seen(0, "connection refused"), Seen(1), Seen(2)])
    clock = _Clock()
    got = wait_for_nodes(lambda: next(seen), 2, 10, "10.0.0.1:21000", clock=clock, sleep=clock.sleep)
    assert got.alive == 2 and clock.now == 2.0


def test_the_wait_gives_up_past_its_timeout_saying_how_many_joined() -> None:
    clock = _Clock()
    with pytest.raises(NodesMissing) as info:
        wait_for_nodes(lambda: Seen(1), 3, 5, "10.0.0.1:21000", "cloud.regions.r.nodes", clock=clock, sleep=clock.sleep)
    assert str(info.value) == (
        "only 1 of 3 Ray nodes (cloud.regions.r.nodes) joined the head at 10.0.0.1:21000 within 5s; the others "
        "could not start Ray or reach the head's port: see their output with sky logs <cluster>"
    )
    assert clock.now == 5.0
    with pytest.raises(NodesMissing, match=r"^the Ray head at h:1 did not answer within 2s \(refused\)"):
        wait_for_nodes(lambda: Seen(0, "refused"), 1, 2, "h:1", clock=clock, sleep=clock.sleep)


def test_a_head_that_is_not_listening_is_counted_as_none_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        seen = GcsCounter(f"127.0.0.1:{port}")()
    assert seen.alive == 0 and f"127.0.0.1:{port}" in seen.error


def test_the_command_writes_its_line_to_the_failed_file_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sky_nodes, "GcsCounter", lambda address: lambda: Seen(1))
    monkeypatch.setattr(sky_nodes, "POLL_S", 0.01)
    failed = tmp_path / "ray-failed"
    argv = ["wait", "10.0.0.1:21000", "2", "0.05", f"--failed={failed}", "--key=cloud.regions.r.nodes"]
    assert sky_nodes.main(argv) == sky_nodes.EXIT_MISSING
    line = failed.read_text().strip()
    assert line.startswith("only 1 of 2 Ray nodes (cloud.regions.r.nodes) joined the head at 10.0.0.1:21000")
    assert capsys.readouterr().err == f"error: {line}\n"
    monkeypatch.setattr(sky_nodes, "GcsCounter", lambda address: lambda: Seen(2))
    assert sky_nodes.main(argv) == 0
    assert sky_nodes.main(["wait", "no-port", "2", "1"]) == sky_nodes.EXIT_USAGE


# --- launch reads the head's answer --------------------------------------------------------


def test_the_ready_probe_answers_ready_missing_nodes_or_not_yet(tmp_path: Path) -> None:
    def probe() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", ready_probe(str(tmp_path))], capture_output=True, text=True, timeout=10)

    assert probe().returncode == 1
    (tmp_path / "ray-failed").write_text("only 1 of 2 Ray nodes joined\n")
    done = probe()
    assert done.returncode == NODES_MISSING and done.stdout == "only 1 of 2 Ray nodes joined\n"
    (tmp_path / "ray-ready").touch()
    assert probe().returncode == 0


def _handle(nodes: int) -> ClusterHandle:
    info = {"sky_cluster": "run-r-g1", "node_dir": "/tmp/osky-x", "num_nodes": nodes, "infra": "aws/us-east-1"}
    return ClusterHandle("run-r-g1", "us-east-1", "skypilot", "127.0.0.1:21000", info)


def test_launch_fails_with_the_heads_line_when_nodes_never_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = SkyPilotProvider({})
    line = "only 1 of 2 Ray nodes (cloud.regions.us-east-1.nodes) joined the head at 10.0.0.1:21000 within 120s"
    answer = subprocess.CompletedProcess([], NODES_MISSING, stdout=f"{line}\n", stderr="")
    monkeypatch.setattr("providers.skypilot.provider.run_ssh", lambda *a, **k: answer)
    with pytest.raises(ProvisionError) as info:
        provider._wait_ready(_handle(2), 60)
    assert info.value.kind is ProvisionErrorKind.TIMEOUT and str(info.value) == f"region us-east-1: {line}"


def test_launch_records_the_node_count(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    provider = SkyPilotProvider(compose(["cloud=aws", "cloud.regions.us-east-1.nodes=2"]).cloud.regions)
    tasks: list[dict[str, Any]] = []
    monkeypatch.setattr("providers.skypilot.provider.build_task", lambda config, secrets=None: tasks.append(config))
    monkeypatch.setattr(SkyPilotProvider, "_launch_within", lambda self, *a: None)
    monkeypatch.setattr(SkyPilotProvider, "_wait_ready", lambda self, *a: None)
    monkeypatch.setattr("providers.skypilot.provider.name_on_cloud", lambda name: name)
    handle = provider.launch(RegionSpec("us-east-1", "s3://b/s", 2, nodes=2), "run-us-east-1-g1", 60.0)
    assert tasks[0]["num_nodes"] == 2 and handle.info["num_nodes"] == 2


# --- the Provider's node methods --------------------------------------------------------------


def test_skypilot_cannot_tell_or_replace_one_node() -> None:
    provider = SkyPilotProvider({})
    cluster = _handle(2)
    assert provider.nodes(cluster) == []
    assert provider.node_processes(cluster, 1) == []
    with pytest.raises(ProvisionError) as info:
        provider.replace_node(cluster, 1, 60.0)
    assert info.value.kind is ProvisionErrorKind.NO_CAPACITY and info.value.region == "us-east-1"
    assert "SkyPilot launches and tears down whole clusters" in str(info.value)
    assert "trainer.min_workers" in str(info.value)
