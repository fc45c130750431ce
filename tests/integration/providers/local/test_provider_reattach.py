"""The connection to the runtime is not the runtime: each provider's connection can be cut
(chaos ssh_drop) while the runtime lives, and re-attached; the runtime's status comes
back through it. Health checks say GONE only when sure. And the injector's two faults
that act on the controller's view (status_flap, ssh_drop). No Ray: the local provider's
runtime is a sleeper, the SkyPilot head's shell runs here with bash.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from providers.base import ClusterHandle
from providers.local.provider import CONNECTION_LOST, LocalProvider
from providers.skypilot.scripts import RUNTIME_GONE, follow_script, runtime_files, runtime_status, start_script
from recovery.detection import Health

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return fh.read().split(") ", 1)[1][0] != "Z"


def _local_cluster(tmp_path: Path) -> ClusterHandle:
    return ClusterHandle("c", "local-a", "local", "", {"temp_dir": str(tmp_path), "base_dir": str(tmp_path)})


def test_a_cut_local_connection_answers_as_a_lost_ssh_session_and_reattaches_to_the_same_process(
    tmp_path: Path,
) -> None:
    provider, cluster = LocalProvider(), _local_cluster(tmp_path)
    conn = provider.start_runtime(cluster, [sys.executable, "-c", "import time; time.sleep(30)"], {}, "/dev/null")
    try:
        assert conn.poll() is None
        assert provider.cut_connection(cluster) == 1
        assert conn.poll() == CONNECTION_LOST and _alive(conn.pid), "the runtime is untouched"
        again = provider.reattach(cluster, conn)
        assert again is not None and again.pid == conn.pid and again.poll() is None
        assert provider.cut_connection(cluster) == 1  # the new one; the cut one is cut already
        os.kill(conn.pid, signal.SIGKILL)
        time.sleep(0.2)
        # Gone: nothing to re-attach to, nothing left to cut.
        assert provider.reattach(cluster, again) is None and provider.cut_connection(cluster) == 0
    finally:
        provider.teardown(cluster)


def test_local_health_is_gone_only_when_the_heads_process_is(tmp_path: Path) -> None:
    provider = LocalProvider()
    head = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    port.listen()
    cluster = ClusterHandle("c", "local-a", "local", "", {"head_pid": head.pid, "port": port.getsockname()[1]})
    try:
        assert provider.health(cluster).health is Health.UP
        port.close()
        check = provider.health(cluster)
        assert check.health is Health.NOT_UP and "does not answer" in check.detail
    finally:
        head.kill()
        head.wait()
    assert provider.health(cluster).health is Health.GONE


def _runtime(tmp_path: Path, body: str) -> tuple[str, str]:
    """A stand-in runtime (a shell script) and the spec path it is started with."""
    script = tmp_path / "runtime.sh"
    script.write_text(body)
    return f"bash {script}", str(tmp_path / "spec-1.json")


def _connect(command: str) -> subprocess.Popen[str]:
    """What ssh runs on the head, run here in a session of its own (as the local ssh is)."""
    return subprocess.Popen(
        ["bash", "-c", command], stdout=subprocess.PIPE, text=True, start_new_session=True, stdin=subprocess.DEVNULL
    )


def test_the_runtime_started_on_the_head_is_followed_to_its_status_and_its_output_streamed(tmp_path: Path) -> None:
    command, spec = _runtime(tmp_path, "echo started; sleep 0.2; echo done; exit 7\n")
    ssh = _connect(start_script(command, spec))
    out, _ = ssh.communicate(timeout=20)
    assert ssh.returncode == 7 and out.splitlines() == ["started", "done"]


def test_a_cut_connection_leaves_the_runtime_training_and_a_new_one_follows_it_to_its_end(tmp_path: Path) -> None:
    command, spec = _runtime(tmp_path, "echo before; sleep 0.8; echo after; exit 4\n")
    ssh = _connect(start_script(command, spec))
    pid_file, status_file, log = runtime_files(spec)
    deadline = time.monotonic() + 10
    while "before" not in (Path(log).read_text() if Path(log).exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(ssh.pid, signal.SIGKILL)  # the connection, as chaos ssh_drop cuts it
    ssh.wait(timeout=10)
    assert _alive(int(Path(pid_file).read_text())), "the runtime outlives its connection"
    again = _connect(follow_script(spec))
    out, _ = again.communicate(timeout=20)
    assert again.returncode == 4 and Path(status_file).read_text().strip() == "4"
    assert out.splitlines() == ["after"], "a re-attached connection streams from where it joins"


def test_a_runtime_killed_by_a_signal_reports_it_and_one_gone_without_a_status_says_so(tmp_path: Path) -> None:
    command, spec = _runtime(tmp_path, "kill -9 $$\n")
    ssh = _connect(start_script(command, spec))
    ssh.communicate(timeout=20)
    assert runtime_status(ssh.returncode) == -signal.SIGKILL
    # The status file gone too (as when the shell that waits is killed with the runtime).
    os.unlink(runtime_files(spec)[1])
    again = _connect(follow_script(spec))
    again.communicate(timeout=20)
    assert again.returncode == RUNTIME_GONE
