"""No process of a local run listens on an address other than loopback: Ray's daemons and
workers, Ray Train's workers and their torch process group (its store, gloo's pairs),
the runtime driver and the controller, listed while a real training job runs."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from providers.local.loopback import loopback_interface
from providers.registry import get_provider
from tests.support.paths import REPO
from tests.support.runs import env_for, ray_pids, wait_no_new_ray

TRAIN_WORKER = "ray::RayTrainWorker"
SCAN_EVERY_S = 0.2


@dataclass(frozen=True)
class Listener:
    pid: int
    process: str
    address: str
    port: int
    kind: str  # "tcp" (listening) or "udp" (bound, unconnected)

    def __str__(self) -> str:
        return f"{self.process} (pid {self.pid}) on {self.kind} {self.address}:{self.port}"


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def _title(proc: psutil.Process) -> str:
    # Ray's workers and agents set their process title (ray::RayTrainWorker...).
    return " ".join(" ".join(proc.cmdline()).split())[:120] or proc.name()


def _listeners(pid: int) -> list[Listener]:
    try:
        proc = psutil.Process(pid)
        conns = proc.net_connections(kind="inet")
        title = _title(proc)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []
    out = []
    for c in conns:
        if c.status == psutil.CONN_LISTEN:
            out.append(Listener(pid, title, c.laddr.ip, c.laddr.port, "tcp"))
        elif c.type == socket.SOCK_DGRAM and c.laddr and not c.raddr:
            out.append(Listener(pid, title, c.laddr.ip, c.laddr.port, "udp"))
    return out


def _run_pids(controller: psutil.Process, provider) -> set[int]:
    """The controller and its children, and every process of each cluster the run has
    (the provider's own list: its marker, or a session it started)."""
    pids = {controller.pid}
    try:
        pids |= {c.pid for c in controller.children(recursive=True)}
    except psutil.NoSuchProcess:
        pass
    for name in os.listdir(provider.state_dir) if os.path.isdir(provider.state_dir) else []:
        cluster = provider.find(name.removesuffix(".json"))
        if cluster is not None:
            pids |= set(provider.processes(cluster))
    return pids


def test_no_process_of_a_local_run_listens_beyond_loopback(tmp_path: Path) -> None:
    before = ray_pids()
    home = tmp_path / "home"
    provider = get_provider("local", str(home))
    argv = [sys.executable, "-m", "orchestrator", "job=digits", "run_id=loopback", "progress=false"]
    # Two workers, one on the head and one on a worker node of its own (its processes
    # too), for long enough that the scans meet the process group up.
    argv += ["trainer.workers=2", "cloud.regions.local-a.nodes=2", "cloud.regions.local-a.num_cpus=1"]
    argv += ["job.steps=300", "checkpoint.interval_steps=100"]
    log = tmp_path / "controller.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, env=env_for(home), stdout=out, stderr=subprocess.STDOUT)
    controller = psutil.Process(proc.pid)
    seen: set[Listener] = set()
    # Per train worker, the most sockets it was seen listening on at once.
    train_listening: dict[int, int] = {}
    gloo_if: set[str | None] = set()
    deadline = time.monotonic() + 110
    try:
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the run did not end in time: " + log.read_text()[-2000:]
            for pid in _run_pids(controller, provider):
                found = _listeners(pid)
                seen.update(found)
                if found and found[0].process.startswith(TRAIN_WORKER):
                    train_listening[pid] = max(train_listening.get(pid, 0), len(found))
                    try:
                        gloo_if.add(psutil.Process(pid).environ().get("GLOO_SOCKET_IFNAME"))
                    except psutil.Error:
                        pass
            time.sleep(SCAN_EVERY_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]
    wide = sorted(str(listener) for listener in seen if not _loopback(listener.address))
    assert wide == [], "listening beyond loopback:\n" + "\n".join(wide)
    # The scans met the process group up: both workers listening (core worker gRPC and
    # gloo's pairs; the group's rendezvous store is the driver's), the spare on each node
    # (an idle Ray Train worker) on gRPC alone; gloo told to stay on loopback (here the
    # hostname may resolve to loopback anyway; elsewhere gloo would take its address).
    grouped = [pid for pid, n in train_listening.items() if n >= 2]
    assert len(grouped) == 2 and len(train_listening) <= 2 + 2, train_listening
    assert gloo_if == {loopback_interface(psutil.net_if_addrs())}, gloo_if
    assert any(listener.process.startswith("ray::") for listener in seen)
    assert not wait_no_new_ray(before)
