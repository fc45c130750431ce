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


def test_a_lost_allocation_is_killed_then_cancelled_and_said_gone_only_once_squeue_lists_it_no_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess

    import providers.skypilot.slurm as slurm

    ran: list[str] = []
    codes = iter([0, 3, 1])

    def run(argv: list[str], **_k: object) -> subprocess.CompletedProcess[str]:
        ran.append(argv[-1])
        return subprocess.CompletedProcess(argv, next(codes), "", "scancel: error: denied\n")

    monkeypatch.setattr(slurm.subprocess, "run", run)
    info = {"infra": "slurm/login1", "name_on_cloud": "r-a-12ab"}
    assert slurm.cancel_allocation(info, wait_s=2) is None
    script = ran[0]
    # SIGKILL to every step and the batch script first: no TERM and grace to finish an upload.
    assert script.index("scancel --signal=KILL --full") < script.index("; scancel -u")
    assert "--name=r-a-12ab" in script and "seq 4" in script and "squeue -h" in script
    assert (
        slurm.cancel_allocation(info, wait_s=2) == "the allocation r-a-12ab was still listed by squeue 2s after scancel"
    )
    assert slurm.cancel_allocation(info) == "scancel of r-a-12ab failed: exit 1: scancel: error: denied"
    assert slurm.cancel_allocation({"infra": "aws/us-east-1", "name_on_cloud": "c"}) == (
        "only a Slurm allocation can be cancelled from here (scancel)"
    )
    assert len(ran) == 3


def test_a_graceful_cancel_is_a_plain_scancel_said_done_once_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    import providers.skypilot.slurm as slurm

    ran: list[str] = []
    codes = iter([0, 1])

    def run(argv: list[str], **_k: object) -> subprocess.CompletedProcess[str]:
        ran.append(argv[-1])
        return subprocess.CompletedProcess(argv, next(codes), "", "scancel: error: denied\n")

    monkeypatch.setattr(slurm.subprocess, "run", run)
    info = {"infra": "slurm/login1", "name_on_cloud": "r-a-12ab"}
    assert slurm.cancel_allocation(info, graceful=True) is None
    # SIGTERM and Slurm's KillWait: no SIGKILL first, and no wait for squeue.
    assert ran[0] == 'scancel -u "$(id -un)" --name=r-a-12ab'
    assert slurm.cancel_allocation(info, graceful=True) == "scancel of r-a-12ab failed: exit 1: scancel: error: denied"


def test_a_frozen_allocation_is_stopped_and_continued_whole_only_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    import providers.skypilot.slurm as slurm

    ran: list[str] = []
    answers = iter([(0, "12\n"), (0, "12\n3\n"), (3, ""), (1, ""), (0, "0\n")])

    def run(argv: list[str], **_k: object) -> subprocess.CompletedProcess[str]:
        ran.append(argv[-1])
        code, out = next(answers)
        return subprocess.CompletedProcess(argv, code, out, "srun: error: denied\n")

    monkeypatch.setattr(slurm.subprocess, "run", run)
    info = {"infra": "slurm/login1", "name_on_cloud": "r-a-12ab"}
    assert slurm.signal_allocation(info, "STOP") is None
    assert slurm.signal_allocation(info, "CONT") is None
    # Only an allocation that runs, a step on each of its nodes, every process of the job
    # there but that step's own (Ray's daemons outlive the step that started them).
    assert "-t RUNNING" in ran[0] and "--name=r-a-12ab" in ran[0]
    assert "srun --overlap" in ran[0] and "--ntasks-per-node=1" in ran[0] and ran[0].endswith(" STOP")
    assert "mine=$(cat /proc/$$/cgroup)" in ran[0] and ran[1].endswith(" CONT")
    assert slurm.signal_allocation(info, "STOP") == "no running allocation r-a-12ab to send SIGSTOP"
    assert slurm.signal_allocation(info, "CONT") == (
        "SIGCONT to the allocation r-a-12ab failed: exit 1: srun: error: denied"
    )
    assert slurm.signal_allocation(info, "STOP") == "the allocation r-a-12ab has no process to send SIGSTOP"
    assert slurm.signal_allocation({"infra": "aws/us-east-1", "name_on_cloud": "c"}, "STOP") == (
        "only a Slurm allocation can be signalled from here (scancel --signal)"
    )
    with pytest.raises(ValueError, match="expected STOP or CONT"):
        slurm.signal_allocation(info, "KILL")
    assert len(ran) == 5
