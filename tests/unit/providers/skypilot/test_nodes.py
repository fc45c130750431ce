"""SkyPilot regions of several nodes, without Ray or a cloud: the task, the run command's
node logic in bash with a fake Python, the head's wait for its nodes (providers.skypilot.nodes),
launch's reading of it, and the Provider's node methods. The same run command with real
Ray nodes is tests/integration/test_skypilot_nodes.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.compose import compose
from providers.base import ClusterHandle, ProvisionError, ProvisionErrorKind, RegionSpec
from providers.skypilot import nodes as sky_nodes
from providers.skypilot.nodes import NodesMissing, Seen, wait_for_nodes
from providers.skypilot.provider import SkyPilotProvider
from providers.skypilot.scripts import NODES_MISSING, RUN_SCRIPT
from providers.skypilot.sdk import build_task
from providers.skypilot.task import task_config
from tests.support.paths import REPO

pytestmark = pytest.mark.unit


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
