"""ssh to a SkyPilot cluster's nodes, through the SSH configuration SkyPilot writes for
each cluster (on Slurm, through the login node into the allocation): the command line,
the one-shot call, and the runtime driver on the head as the local ssh following it
(``SshRuntime``). Nothing here imports SkyPilot."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable

from providers.base import ClusterHandle
from providers.skypilot.scripts import runtime_status
from providers.skypilot.slurm import in_allocation, on_slurm
from providers.skypilot.task import REMOTE_WORKDIR

# ssh's own status when it fails or loses the head: it says nothing of the runtime.
SSH_FAILED = 255


def remote(handle: ClusterHandle, command: str, node: int = 0) -> str:
    """``command`` as it must run to be on the head (or node ``node`` of the cluster),
    in the project's synced copy. A cloud VM is what ssh reaches; on Slurm, ssh reaches
    the login node and the command goes into the cluster's allocation (``slurm.in_allocation``)."""
    in_workdir = f"cd {REMOTE_WORKDIR}; {command}"
    name = handle.info.get("name_on_cloud")
    if not on_slurm(handle.info) or not name:
        return in_workdir
    return in_allocation(str(name), in_workdir, node)


def ssh_argv(handle: ClusterHandle, command: str, node: int = 0, connect_timeout_s: int = 0) -> list[str]:
    """The local ssh that runs ``command`` (``remote``'s) on node ``node`` of the cluster."""
    sky_name = handle.info["sky_cluster"]
    config = os.path.expanduser(f"~/.sky/generated/ssh/{sky_name}")
    # SkyPilot's SSH configuration names the head after the cluster, node i > 0
    # <cluster>-worker<i>; on Slurm every node is reached through the login node.
    host = sky_name if node == 0 or on_slurm(handle.info) else f"{sky_name}-worker{int(node)}"
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


def run_ssh(
    handle: ClusterHandle, command: str, check: bool = True, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    """``command`` on the head, its output captured."""
    return subprocess.run(
        ssh_argv(handle, command),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=check,
        stdin=subprocess.DEVNULL,
    )


def name_on_cloud(sky_name: str) -> str | None:
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
