"""The connection to the runtime is not the runtime: each provider's connection can be cut
(chaos ssh_drop) while the runtime lives, and re-attached; the runtime's status comes
back through it. Health checks say GONE only when sure. And the injector's two faults
that act on the controller's view (status_flap, ssh_drop). No Ray: the local provider's
runtime is a sleeper, the SkyPilot head's shell runs here with bash."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.chaos.injector import FaultInjector, FlappedCheck
from orchestrator.runstate.events import FaultEnded, FaultFailed
from orchestrator.wire.control import ControlChannel
from providers.base import ClusterHandle, Health, HealthCheck
from providers.local.provider import CONNECTION_LOST, LocalProvider
from providers.skypilot.provider import SkyPilotProvider
from providers.skypilot.scripts import RUNTIME_GONE, follow_script, runtime_files, runtime_status, start_script
from providers.skypilot.sdk import sky_health
from providers.skypilot.ssh import SshRuntime

pytestmark = pytest.mark.unit


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return fh.read().split(") ", 1)[1][0] != "Z"


# --- the local provider ------------------------------------------------------------------------


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


# --- SkyPilot: the head's shell, run here --------------------------------------------------------


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


class _Ended:
    def __init__(self, code: int) -> None:
        self.pid, self.returncode = 1, code

    def poll(self) -> int:
        return self.returncode


@pytest.mark.parametrize(
    ("ssh_status", "seen", "reattach"),
    [
        (0, 0, False),
        (4, 4, False),
        (137, -9, False),  # the runtime killed by SIGKILL: the waiting shell's 128+9
        (RUNTIME_GONE, RUNTIME_GONE, False),
        (97, 97, False),  # no Slurm allocation any more
        (255, 255, True),  # ssh lost its session
        (-9, -9, True),  # the local ssh was killed (ssh_drop)
    ],
)
def test_an_ssh_that_failed_is_reattached_and_one_that_brought_the_runtimes_status_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ssh_status: int, seen: int, reattach: bool
) -> None:
    refreshed: list[int] = []
    proc = SshRuntime(_Ended(ssh_status), lambda: refreshed.append(1), "/tmp/osky-x/spec-1.json", os.devnull)  # type: ignore[arg-type]
    assert proc.poll() == seen and proc.connection_failed is reattach
    assert refreshed == ([1] if ssh_status else []), "an ssh that fails has the cluster looked at at once"
    provider = SkyPilotProvider({}, out=io.StringIO())
    started: list[list[str]] = []

    def popen(argv: list[str], **kwargs: Any) -> _Ended:
        started.append(argv)
        return _Ended(0)

    monkeypatch.setattr(SkyPilotProvider, "_record", lambda self, c: None)
    monkeypatch.setattr("providers.skypilot.provider.subprocess.Popen", popen)
    cluster = ClusterHandle("c", "r", "skypilot", "", {"sky_cluster": "c", "infra": "aws/us-east-1"})
    again = provider.reattach(cluster, proc)
    assert (again is not None) is reattach
    if again is not None:
        assert isinstance(again, SshRuntime) and again.remote_spec == proc.remote_spec
        assert "--pid=" in started[0][-1] and "spec-1.pid" in started[0][-1]


@pytest.mark.parametrize(
    ("statuses", "health"),
    [
        (["UP"], Health.UP),
        (["INIT"], Health.NOT_UP),  # a node or Ray not answering: may pass
        ([], Health.GONE),  # no record
        (["STOPPED"], Health.GONE),
    ],
)
def test_skypilots_statuses_are_gone_only_for_no_record_or_a_stopped_cluster(
    statuses: list[str], health: Health
) -> None:
    assert sky_health(statuses) is health


# --- the injector's status_flap and ssh_drop -----------------------------------------------------


def _injector(tmp_path: Path, fault: dict[str, Any], provider: object) -> tuple[FaultInjector, list[object]]:
    events: list[object] = []
    control = ControlChannel(f"file://{tmp_path}/control")
    inj = FaultInjector([fault], control, provider, lambda: [], "r", on_event=events.append)  # type: ignore[arg-type]
    return inj, events


CLUSTER = ClusterHandle("c", "local-a", "local", "")


def test_status_flap_fails_count_checks_in_turn_not_up_and_raising_then_answers_as_the_provider(
    tmp_path: Path,
) -> None:
    inj, events = _injector(tmp_path, {"kind": "status_flap", "after_s": 1.0, "count": 3}, object())
    real = HealthCheck(Health.UP, 1.0)
    assert inj.health(CLUSTER, lambda: real) is real
    (fired,) = inj.timed(CLUSTER, None, 1, training_for_s=1.5)
    assert (fired.kind, fired.detail["count"]) == ("status_flap", 3)
    first = inj.health(CLUSTER, lambda: real)
    assert first.health is Health.NOT_UP and "1 of 3" in first.detail
    with pytest.raises(FlappedCheck, match="2 of 3"):
        inj.health(CLUSTER, lambda: real)
    assert inj.health(CLUSTER, lambda: real).health is Health.NOT_UP
    assert events == [FaultEnded(0, "status_flap", region="local-a")]
    assert inj.health(CLUSTER, lambda: real) is real


def test_ssh_drop_cuts_through_the_provider_or_fails_where_it_has_no_connection_to_cut(tmp_path: Path) -> None:
    class Cuts:
        name = "x"

        def cut_connection(self, cluster: ClusterHandle) -> int:
            return 2

    inj, _ = _injector(tmp_path / "a", {"kind": "ssh_drop", "after_s": 1.0}, Cuts())
    (fired,) = inj.timed(CLUSTER, None, 1, training_for_s=2.0)
    assert fired.detail["cut"] == 2
    inj, events = _injector(tmp_path / "b", {"kind": "ssh_drop", "after_s": 1.0}, type("P", (), {"name": "p"})())
    (fired,) = inj.timed(CLUSTER, None, 1, training_for_s=2.0)
    assert "no connection to the runtime to cut" in str(fired.detail["failed"])
    assert [type(e) for e in events] == [FaultFailed]
