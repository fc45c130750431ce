"""Reaching a cluster's nodes over ssh, and the runtime seen through its follower."""

from __future__ import annotations

from typing import Any

import pytest

from providers.base import ClusterHandle
from providers.skypilot.ssh import SSH_FAILED, SshRuntime, remote, ssh_argv

pytestmark = pytest.mark.unit


def handle(**info: Any) -> ClusterHandle:
    return ClusterHandle("c", "r", "skypilot", "", {"sky_cluster": "c-1", **info})


def test_a_vm_runs_the_command_in_the_synced_project_and_slurm_inside_its_allocation() -> None:
    assert remote(handle(infra="aws/us-east-1"), "true") == "cd ~/sky_workdir; true"
    slurm = handle(infra="slurm/login", name_on_cloud="c-1-ab")
    assert remote(slurm, "true").startswith("name=c-1-ab;") and "--relative=2 " in remote(slurm, "true", node=2)
    assert remote(handle(infra="slurm/login"), "true") == "cd ~/sky_workdir; true", "not yet named on the cloud"


def test_node_i_is_its_worker_host_on_a_vm_and_the_login_node_on_slurm() -> None:
    argv = ssh_argv(handle(infra="gcp/us-central1"), "echo hi", node=1, connect_timeout_s=5)
    assert argv[-2:] == ["c-1-worker1", "bash --login -c 'echo hi'"] and "ConnectTimeout=5" in argv
    assert "ConnectTimeout=20" in ssh_argv(handle(), "true")
    assert ssh_argv(handle(infra="slurm/x"), "true", node=1)[-2] == "c-1"


class Proc:
    def __init__(self, code: int | None) -> None:
        self.pid, self.returncode = 7, code

    def poll(self) -> int | None:
        return self.returncode


@pytest.mark.parametrize(("code", "failed", "seen"), [(0, False, 0), (137, False, -9), (SSH_FAILED, True, SSH_FAILED)])
def test_the_followers_status_is_the_runtimes_unless_ssh_failed(code: int, failed: bool, seen: int) -> None:
    errors: list[int] = []
    proc = SshRuntime(Proc(code), lambda: errors.append(1), "/n/spec.json", "/l")  # type: ignore[arg-type]
    assert proc.poll() == seen and proc.connection_failed is failed
    proc.poll()
    assert errors == ([1] if code else []), "an error asks SkyPilot once"
