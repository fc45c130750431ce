"""The control channel's trust boundary: what the runtime writes is parsed, never believed.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.chaos.injector import FaultInjector
from orchestrator.chaos.processes import victim_problem
from orchestrator.runstate.event_json import payload
from orchestrator.runstate.events import type_of
from orchestrator.wire.control import ControlChannel
from providers.base import Capability, ClusterHandle
from providers.procs import MARKER, marked

pytestmark = pytest.mark.integration


# --- chaos: the request's generation, and whose pid ----------------------------------------------------
class FakeProvider:
    name = "local"
    capabilities = frozenset({Capability.LOCAL_PROCESSES})

    def processes(self, cluster: ClusterHandle) -> list[int]:
        return marked(cluster.name)


class RemoteProvider(FakeProvider):
    name = "skypilot"
    capabilities: frozenset[Capability] = frozenset()


def _injector(tmp_path: Path, provider: Any, kind: str = "kill_worker") -> tuple[FaultInjector, list[Any]]:
    events: list[Any] = []
    control = ControlChannel(f"file://{tmp_path}/control")
    inj = FaultInjector(
        [{"kind": kind, "at_step": 20}],
        control,
        provider,
        lambda: [],
        "r",
        on_event=lambda ev: events.append((type_of(ev), payload(ev))),
    )
    return inj, events


def _sleeper(cluster: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != MARKER}
    if cluster is not None:
        env[MARKER] = cluster
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    deadline = time.monotonic() + 10
    while cluster is not None and proc.pid not in marked(cluster) and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    time.sleep(0.2)
    return proc.poll() is None


def test_a_request_from_an_older_generation_does_not_fire_and_is_journaled_once(tmp_path: Path) -> None:
    inj, events = _injector(tmp_path, FakeProvider())
    cluster = ClusterHandle("r-local-a-g3", "local-a", "local", "")
    victim = _sleeper(cluster.name)
    try:
        inj.control.chaos_request(0, seq=1, kind="kill_worker", step=20, rank=0, pid=victim.pid, generation=2)
        assert inj.poll(cluster, None, generation=3) == []
        assert inj.poll(cluster, None, generation=3) == []
        assert [t for t, _ in events] == ["fault_refused"]
        assert events[0][1]["request_generation"] == 2 and inj.control.fired_count(0) == 0
        assert _alive(victim)
        # A newer generation's (a standby's) request waits, unjournaled, for its own watch.
        inj.control.chaos_request(0, seq=1, kind="kill_worker", step=20, rank=0, pid=victim.pid, generation=4)
        assert inj.poll(cluster, None, generation=3) == [] and len(events) == 1
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("who", ["unmarked", "parent", "other_cluster"])
def test_kill_worker_naming_a_pid_not_of_the_cluster_kills_nothing(tmp_path: Path, who: str) -> None:
    inj, events = _injector(tmp_path, FakeProvider())
    cluster = ClusterHandle("r-local-a-g2", "local-a", "local", "")
    proc = _sleeper(None if who == "unmarked" else "r-local-b-g1")
    pid = os.getppid() if who == "parent" else proc.pid
    try:
        inj.control.chaos_request(0, seq=1, kind="kill_worker", step=20, rank=0, pid=pid, generation=2)
        (fired,) = inj.poll(cluster, None, generation=2)
        assert fired.detail["killed"] == 0 and "not a process of cluster" in str(fired.detail["refused"])
        assert [t for t, _ in events] == ["fault_refused"]
        assert _alive(proc) and psutil.pid_exists(os.getppid())
    finally:
        proc.kill()
        proc.wait()


def test_kill_worker_kills_a_process_of_the_cluster(tmp_path: Path) -> None:
    inj, events = _injector(tmp_path, FakeProvider())
    cluster = ClusterHandle("r-local-a-g2", "local-a", "local", "")
    victim = _sleeper(cluster.name)
    try:
        inj.control.chaos_request(0, seq=1, kind="kill_worker", step=20, rank=0, pid=victim.pid, generation=2)
        (fired,) = inj.poll(cluster, None, generation=2)
        assert fired.detail["killed"] == 1 and "refused" not in fired.detail and events == []
        assert victim.wait(timeout=10) == -signal.SIGKILL
    finally:
        victim.kill()
        victim.wait()


def test_kill_worker_on_a_remote_cluster_never_signals_a_local_pid(tmp_path: Path) -> None:
    cluster = ClusterHandle("r-aws-g2", "aws", "skypilot", "")
    victim = _sleeper(cluster.name)  # even one the provider would list
    try:
        problem = victim_problem(RemoteProvider(), cluster, victim.pid)
        assert problem == (
            "signalling a worker's pid on this machine needs the provider capability local_processes, "
            "which provider skypilot lacks"
        )
        inj, events = _injector(tmp_path, RemoteProvider())
        inj.control.chaos_request(0, seq=1, kind="kill_worker", step=20, rank=0, pid=victim.pid, generation=2)
        (fired,) = inj.poll(cluster, None, generation=2)
        assert fired.detail["killed"] == 0 and [t for t, _ in events] == ["fault_refused"]
        assert _alive(victim)
    finally:
        victim.kill()
        victim.wait()
