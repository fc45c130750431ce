"""A cluster on Slurm: commands into its allocation, through the login node."""

from __future__ import annotations

import pytest

from providers.skypilot.slurm import allocation_running, in_allocation, login_argv, on_slurm, sweep

pytestmark = pytest.mark.unit


def test_a_command_goes_into_the_named_allocation_on_the_node_asked() -> None:
    cmd = in_allocation("c-1", "cd ~/sky_workdir; true")
    assert cmd.startswith("name=c-1;") and "srun --unbuffered --overlap" in cmd and "exit 97" in cmd
    assert "--relative" not in cmd and "--relative=1 " in in_allocation("c-1", "true", node=1)


def test_the_login_node_is_the_infras_and_what_is_not_slurm_is_left_alone() -> None:
    argv = login_argv("slurm/login1", "squeue")
    assert argv[0] == "ssh" and argv[-2:] == ["login1", "squeue"] and argv[2].endswith(".slurm/config")
    assert on_slurm({"infra": "slurm/x"}) and not on_slurm({"infra": "aws/us-east-1"}) and not on_slurm({})
    assert allocation_running({"infra": "aws/us-east-1", "name_on_cloud": "c"}) is None
    assert allocation_running({"infra": "slurm/x"}) is None, "not yet named: unknown"
    said: list[str] = []
    sweep({"infra": "aws/us-east-1", "node_dir": "/tmp/n"}, said.append)
    assert said == []


def test_a_sweep_that_keeps_the_runtime_removes_only_our_node_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    import providers.skypilot.slurm as slurm

    ran: list[str] = []
    monkeypatch.setattr(slurm.subprocess, "run", lambda argv, **_k: ran.append(argv[-1]))
    info = {"infra": "slurm/login1", "node_dir": "/tmp/osky-1", "name_on_cloud": "r-a-12ab"}
    sweep(info, lambda _line: None, runtime=False)
    sweep(info, lambda _line: None)
    assert ran == ["rm -rf /tmp/osky-1", "rm -rf /tmp/osky-1 ~/.sky_clusters/r-a-12ab /tmp/r-a-12ab"]
