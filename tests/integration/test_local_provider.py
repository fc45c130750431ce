"""The local provider against real Ray: launch, health, runtime, listeners on loopback only
(the dashboard's too), a worker node lost, replaced and hung, teardown that leaves nothing."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from providers.base import ClusterHandle, ProvisionError, ProvisionErrorKind, RegionSpec
from providers.local.provider import TOKEN_NAME, LocalProvider
from recovery.detection import Health
from tests.support.runs import ray_pids, wait_no_new_ray


def test_launch_health_runtime_loopback_dashboard_nodes_and_idempotent_teardown(tmp_path):
    """One cluster of two nodes of 1 CPU, launched with cloud.dashboard on (the default's
    processes and the dashboard's), checked from its start to a teardown that leaves
    nothing: its worker node killed, replaced and hung on the way."""
    before = ray_pids()
    provider = LocalProvider(state_dir=str(tmp_path / "state"), dashboard=True)
    cluster = provider.launch(RegionSpec("local-x", f"file://{tmp_path}/store", 1, 0, 2), "t-launch", timeout_s=90)
    try:
        assert provider.health(cluster).health is Health.UP
        host, _port = cluster.address.split(":")
        assert host == "127.0.0.1"
        # A `python -m` runtime runs in the interpreter that imported Ray Train while the
        # cluster started (providers/warm.py); any other command line starts cold.
        log = tmp_path / "rt.log"
        runtime = provider.start_runtime(
            cluster, [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"], {"K": "v"}, str(log)
        )
        assert runtime.pid == cluster.info["warm_pid"]
        deadline = time.monotonic() + 60
        while "Serving HTTP on 127.0.0.1" not in (log.read_text() if log.exists() else ""):
            assert runtime.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        cold = provider.start_runtime(
            cluster, [sys.executable, "-c", "import time; time.sleep(120)"], {}, str(tmp_path / "cold.log")
        )
        assert cold.pid != runtime.pid
        pids = set(provider.processes(cluster))
        assert {runtime.pid, cold.pid} <= pids
        assert len(pids) >= 3  # ray start, gcs_server, raylet at least
        # Neither Ray Client's server nor the autoscaler's monitor: a fixed one-node
        # cluster that drivers reach by its GCS address uses neither.
        cmdlines = [" ".join(psutil.Process(p).cmdline()) for p in pids if psutil.pid_exists(p)]
        assert not [c for c in cmdlines if "ray.util.client.server" in c or "autoscaler/_private/monitor.py" in c]
        _only_its_token_connects(provider, cluster, tmp_path)
        _only_loopback_listeners_and_the_dashboard_wants_the_token(provider, cluster)
        _private(cluster)
        _a_worker_node_killed_replaced_and_hung(provider, cluster, tmp_path)
    finally:
        provider.teardown(cluster)
    assert not os.path.exists(cluster.info["base_dir"])
    assert provider.processes(cluster) == []
    assert provider.health(cluster).health is Health.GONE
    assert runtime.poll() is not None and cold.poll() is not None
    provider.teardown(cluster)  # already gone: not an error
    assert not wait_no_new_ray(before)


CONNECT = "import ray; ray.init(address={!r}, log_to_driver=False); print('connected')"

# A driver that answers, per line it reads, the IDs of the cluster's alive Ray nodes (Ray
# prints a node's death on the driver's stdout too).
ALIVE = """
import json, sys, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

@ray.remote(num_cpus=0)
class Had:
    def __init__(self):
        wanted = ("torch", "torch._dynamo", "orchestrator.runtime.loop.train_loop")
        self.had = sorted(m for m in wanted if m in sys.modules)
    def get(self):
        return self.had

ray.init(address=sys.argv[1], log_to_driver=False)
for line in sys.stdin:
    if line.startswith("preloaded "):
        pin = NodeAffinitySchedulingStrategy(node_id=line.split()[1], soft=False)
        print("preloaded", json.dumps(ray.get(Had.options(scheduling_strategy=pin).remote().get.remote())), flush=True)
        continue
    print("alive", json.dumps(sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])), flush=True)
"""


def _until(done, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)
    return done()


def _a_worker_node_killed_replaced_and_hung(provider: LocalProvider, cluster: ClusterHandle, tmp_path: Path) -> None:
    """Ray sees two nodes; node 1's processes (its raylet among them, the head's none)
    SIGKILLed is GONE, to this provider and to one that only read the cluster's record
    (a resumed controller); a replacement past its time is a TIMEOUT; replaced, it is
    UP and Ray sees two alive nodes again, the new one in the old one's place, its idle
    worker having imported torch and the training loop ahead (a first node's did not);
    SIGSTOPped, it is NOT_UP (the teardown's to end)."""
    with open(tmp_path / "probe.err", "wb") as err:
        probe = subprocess.Popen(
            [sys.executable, "-c", ALIVE, cluster.address],
            env=provider.cluster_env(cluster),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )

    def ask(question: str, answer: str) -> list[str]:
        assert probe.stdin is not None and probe.stdout is not None
        probe.stdin.write(question + "\n")
        probe.stdin.flush()
        while True:
            line = probe.stdout.readline()
            assert line, (tmp_path / "probe.err").read_text()[-2000:]
            if line.startswith(answer + " "):
                return json.loads(line.removeprefix(answer + " "))

    def alive() -> list[str]:
        return ask("", "alive")

    def preloaded(node_id: str) -> list[str]:
        """What an idle worker process of that node had imported before it was handed an actor."""
        return ask(f"preloaded {node_id}", "preloaded")

    try:
        first = alive()
        assert len(first) == 2
        # A node the cluster starts with imports nothing ahead (the driver's start needs the cores).
        assert [preloaded(n) for n in first] == [[], []]
        resumed = LocalProvider(state_dir=str(tmp_path / "state")).find(cluster.name)
        assert resumed is not None and [r["index"] for r in resumed.info["nodes"]] == [1]
        assert [(c.index, c.health) for c in provider.nodes(cluster)] == [(1, Health.UP)]
        assert [(c.index, c.health) for c in LocalProvider().nodes(resumed)] == [(1, Health.UP)]
        node = provider.node_processes(cluster, 1)
        assert "raylet" in {psutil.Process(p).name() for p in node}
        # A process of the node may end between the two listings (a Ray worker's helper).
        listed = set(provider.processes(cluster))
        assert {p for p in node if psutil.pid_exists(p)} <= listed and cluster.info["head_pid"] not in node
        for pid in node:
            os.kill(pid, signal.SIGKILL)
        assert _until(lambda: provider.nodes(cluster)[0].health is Health.GONE)
        assert LocalProvider().nodes(resumed)[0].health is Health.GONE
        # A replacement not up in time is a timeout, and nothing of it is left.
        with pytest.raises(ProvisionError) as late:
            provider.replace_node(cluster, 1, timeout_s=0.05)
        assert late.value.kind is ProvisionErrorKind.TIMEOUT and "node_replace_timeout_s" in str(late.value)
        assert provider.nodes(cluster)[0].health is Health.GONE and provider.node_processes(cluster, 1) == []
        provider.replace_node(cluster, 1, timeout_s=60)
        assert [(c.index, c.health) for c in provider.nodes(cluster)] == [(1, Health.UP)]
        # The old node is dead to Ray once the head's health checks miss it (seconds).
        assert _until(lambda: len(alive()) == 2 and alive() != first), alive()
        new = provider.node_processes(cluster, 1)
        assert new and not set(new) & set(node)
        # A replacement's idle worker imported torch and the training loop while it came up.
        (added,) = set(alive()) - set(first)
        assert preloaded(added) == ["orchestrator.runtime.loop.train_loop", "torch", "torch._dynamo"]
        recorded = LocalProvider(state_dir=str(tmp_path / "state")).find(cluster.name)
        assert recorded is not None and recorded.info["nodes"] == cluster.info["nodes"]
        for pid in new:
            os.kill(pid, signal.SIGSTOP)
        # A signal is delivered, and the process seen stopped, a moment after kill() returns.
        assert _until(lambda: provider.nodes(cluster)[0].health is Health.NOT_UP)
    finally:
        probe.kill()
        probe.communicate()


def _only_its_token_connects(provider: LocalProvider, cluster: ClusterHandle, tmp_path: Path) -> None:
    """Ray's token auth is on: a driver with the cluster's environment connects, one
    without the token, with token auth off, or with another token is refused."""
    code = CONNECT.format(cluster.address)
    # One try at the GCS, not Ray's 20 (a second each): the cluster is up, so the right
    # token connects at the first, and a refusal is the token's, not a slow start's.
    env = {**provider.cluster_env(cluster), "RAY_gcs_server_port_wait_time_s": "1"}
    ok = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "connected" in ok.stdout, ok.stderr[-2000:]
    other = tmp_path / "other_token"
    other.write_text("0" * 64)
    no_token = {k: v for k, v in env.items() if k != "RAY_AUTH_TOKEN_PATH"}
    for label, bad in {
        "no token": no_token,
        "auth off": {**no_token, "RAY_AUTH_MODE": "disabled"},
        "another token": {**env, "RAY_AUTH_TOKEN_PATH": str(other)},
    }.items():
        done = subprocess.run([sys.executable, "-c", code], env=bad, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and "connected" not in done.stdout, label


def _private(cluster: ClusterHandle) -> None:
    """Ray makes its temp dir 0777; it lies in a 0700 folder, with the token (0600) and
    the scratch copy (outside Ray's temp dir) beside it."""
    base, temp, scratch = (cluster.info[k] for k in ("base_dir", "temp_dir", "scratch_dir"))
    assert stat.S_IMODE(os.stat(base).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(base, TOKEN_NAME)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(scratch).st_mode) == 0o700
    assert os.path.dirname(temp) == base and os.path.dirname(scratch) == base
    assert not scratch.startswith(temp + os.sep)


# A driver that prints the pid of an actor asking for one CPU and no environment of its own.
ACTOR_PID = """
import os, ray
ray.init(address={!r}, log_to_driver=False, logging_level="ERROR")
print(ray.get(ray.remote(num_cpus=1)(type("A", (), {{"pid": lambda self: os.getpid()}})).remote().pid.remote()))
"""


def test_without_its_dashboard_no_dashboard_process_and_a_first_actor_takes_an_idle_worker(tmp_path):
    """cloud.dashboard off (the default): the head starts no dashboard process at all
    (providers.raystart --no-api-server); its raylet starts one idle worker process per
    CPU as it comes up, and an actor that asks for no environment of its own (as Ray
    Train's do: orchestrator/runtime/trainer.py) runs in one of them."""
    before = ray_pids()
    provider = LocalProvider()
    cluster = provider.launch(RegionSpec("local-z", f"file://{tmp_path}/store", 2), "t-idle", timeout_s=90)
    try:
        deadline = time.monotonic() + 30
        while True:
            cmdlines = {p: _cmdline(p) for p in provider.processes(cluster)}
            idle = {p for p, c in cmdlines.items() if c.startswith("ray::IDLE")}
            if len(idle) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(idle) == 2, cmdlines
        assert not [c for c in cmdlines.values() if "dashboard/dashboard.py" in c], cmdlines
        done = subprocess.run(
            [sys.executable, "-c", ACTOR_PID.format(cluster.address)],
            env=provider.cluster_env(cluster),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert int(done.stdout.split()[-1]) in idle
    finally:
        provider.teardown(cluster)
    assert not wait_no_new_ray(before)


def test_two_controllers_clusters_of_one_name_are_each_their_own(tmp_path):
    """Two controllers on this machine (two ORCHESTRATOR_HOMEs, the same run id) launch a
    cluster under the same name: each provider sees and ends only its own, as its
    processes carry the name and a token of their launch."""
    before = ray_pids()
    first, second = (LocalProvider(state_dir=str(tmp_path / f"state-{i}")) for i in (1, 2))
    spec = RegionSpec("local-w", f"file://{tmp_path}/store", 1)
    one = first.launch(spec, "t-same", timeout_s=90)
    try:
        two = second.launch(spec, "t-same", timeout_s=90)
        try:
            assert one.info["marker"] != two.info["marker"]
            assert one.info["marker"].startswith("t-same@")
            mine, theirs = set(first.processes(one)), set(second.processes(two))
            assert mine and theirs and not mine & theirs
            first.teardown(one)
            assert first.processes(one) == []
            assert set(second.processes(two)) == theirs and all(psutil.pid_exists(p) for p in theirs)
            assert second.health(two).health is Health.UP
        finally:
            second.teardown(two)
    finally:
        first.teardown(one)
    assert not wait_no_new_ray(before)


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:  # ended since it was listed
        return ""


def test_a_cluster_that_is_not_ready_in_time_is_a_timeout_and_leaves_nothing(tmp_path):
    before = ray_pids()
    provider = LocalProvider()
    with pytest.raises(ProvisionError) as err:
        provider.launch(RegionSpec("local-y", f"file://{tmp_path}/store", 2), "t-timeout", timeout_s=0.05)
    assert err.value.kind is ProvisionErrorKind.TIMEOUT
    assert "local-y" in str(err.value)
    assert not wait_no_new_ray(before)


def _loopback(ip: str) -> bool:
    import ipaddress

    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def _only_loopback_listeners_and_the_dashboard_wants_the_token(provider: LocalProvider, cluster: ClusterHandle) -> None:
    """Every process of the cluster listens on loopback only; the dashboard answers HTTP
    there, and its API wants the cluster's token."""
    import urllib.error
    import urllib.request

    pids = set(provider.processes(cluster))
    listening = [c for c in psutil.net_connections(kind="inet") if c.pid in pids and c.status == psutil.CONN_LISTEN]
    assert [(c.laddr, c.pid) for c in listening if not _loopback(c.laddr.ip)] == []
    url = cluster.info["dashboard"]
    port = int(url.rsplit(":", 1)[1])
    assert url == f"http://127.0.0.1:{port}" and port in {c.laddr.port for c in listening}
    with urllib.request.urlopen(url + "/", timeout=10) as page:
        assert page.status == 200 and b"<html" in page.read(4096).lower()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url + "/api/version", timeout=10)
    assert refused.value.code == 401
    token_path = Path(cluster.info["base_dir"]) / TOKEN_NAME
    assert str(token_path) in cluster.info["dashboard_access"]
    asked = urllib.request.Request(url + "/api/version", headers={"Authorization": f"Bearer {token_path.read_text()}"})
    with urllib.request.urlopen(asked, timeout=10) as version:
        assert version.status == 200
