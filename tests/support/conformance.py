"""The provider contract as tests: one suite every provider's own test class subclasses
(``class TestMineConformance(ProviderConformance)``), giving its provider, the region the
suite launches in and the config its plan is made from. What it checks is
providers/base.py's contract: a cluster launched in a region is UP and found again from the
provider's records, the runtime started on it reaches its Ray and its exit status is the
runtime's, the worker nodes as ``nodes()`` reports them, the precheck and the plan, each
capability declared doing what it says (and its methods there: a cluster killed where
it runs is no longer UP), and a teardown that may be repeated.

One cluster per class (a class-scoped fixture): every test but the last shares it, and the
last tears it down (pytest runs a base class's tests first, in their order: a subclass's own
tests that need a cluster belong in a class of their own). Tests for capabilities a provider
does not declare check that it says so the contract's way (``replace_node`` refuses,
``nodes()`` is []), or skip.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.config.schema import Config
from orchestrator.wire.logfiles import KeptLogs
from providers.base import (
    CAPABILITY_METHODS,
    Capability,
    ClusterHandle,
    NodeCheck,
    Plan,
    Provider,
    ProvisionError,
    ProvisionErrorKind,
    RegionSpec,
    RuntimeProcess,
)
from recovery.detection import Health

# The runtime the suite starts: it reaches the cluster's Ray with what the provider gave
# its environment, says what it saw, waits as long as it is told and exits with the status
# it is told, so the status the controller gets can be told from any other.
PROBE = (
    "import json, os, sys, time\n"
    "print('conformance: started', flush=True)\n"
    "seen = {'env': os.environ.get('ORCH_CONFORMANCE_ENV')}\n"
    "if os.environ.get('ORCH_CONFORMANCE_RAY') == '1':\n"
    "    import ray\n"
    "    ray.init(address=os.environ['ORCH_CONFORMANCE_ADDRESS'], log_to_driver=False)\n"
    "    seen['cpus'] = ray.cluster_resources().get('CPU', 0)\n"
    "    seen['nodes'] = sum(1 for n in ray.nodes() if n['Alive'])\n"
    "    ray.shutdown()\n"
    "print('conformance: ' + json.dumps(seen), flush=True)\n"
    "time.sleep(float(os.environ.get('ORCH_CONFORMANCE_SLEEP', '0')))\n"
    "sys.exit(int(os.environ['ORCH_CONFORMANCE_EXIT']))\n"
)
# A status no runtime, ssh or signal gives by accident.
PROBE_EXIT = 7


@dataclass
class Launched:
    provider: Provider
    cluster: ClusterHandle
    region: RegionSpec
    work: Path  # a folder of the suite's on this machine


def wait_exit(proc: RuntimeProcess, timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while (code := proc.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    return code


def wait_line(log: Path, text: str, proc: RuntimeProcess, timeout_s: float) -> str:
    """The first line of ``log`` holding ``text``, once the runtime wrote it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        found = next((line for line in lines if text in line), None)
        if found is not None:
            return found
        assert proc.poll() is None, f"the runtime ended ({proc.poll()}) before saying {text!r}: {lines[-20:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in the runtime's log within {timeout_s:g}s: {log}")


class ProviderConformance:
    """The contract, for the provider a subclass gives. Not collected itself (no Test prefix)."""

    # How long a launch may take (a cloud's is minutes).
    launch_timeout_s: float = 180.0
    # How long the runtime may take to reach the cluster's Ray and exit.
    runtime_timeout_s: float = 120.0
    # How long the runtime whose connection is cut runs on: long enough to cut the
    # connection and start a new one (an ssh into a Slurm allocation takes seconds).
    cut_runtime_s: float = 8.0

    # --- what a subclass gives -----------------------------------------------------------
    def make_provider(self, work: Path) -> Provider:
        """The provider under test, keeping its records of clusters under ``work``."""
        raise NotImplementedError

    def region(self, work: Path) -> RegionSpec:
        """The region the suite launches its one cluster in (give it 2 nodes where the
        provider declares NODES, so that a worker node is there to report and replace)."""
        raise NotImplementedError

    def config(self) -> Config:
        """A run's config on this provider whose candidate regions include ``region``'s
        (what precheck and plan are asked about)."""
        raise NotImplementedError

    # --- the cluster the class shares ------------------------------------------------------
    @pytest.fixture(scope="class")
    @classmethod
    def launched(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
        suite = cls()
        work = tmp_path_factory.mktemp("conformance")
        provider = suite.make_provider(work)
        if Capability.TOKEN_KEY in provider.capabilities:
            provider.use_token_key(b"conformance-key-" * 2)  # type: ignore[attr-defined]
        region = suite.region(work)
        cluster = provider.launch(region, f"conf-{uuid.uuid4().hex[:6]}", suite.launch_timeout_s)
        try:
            yield Launched(provider, cluster, region, work)
        finally:
            provider.teardown(cluster)

    def start_probe(self, launched: Launched, name: str, *, ray: bool, sleep_s: float = 0.0) -> tuple[Any, Path]:
        """The probe started as the cluster's runtime; (its process, its log here)."""
        spec = launched.work / f"{name}.json"
        spec.write_text(json.dumps({"probe": name}))
        log = launched.work / f"{name}.log"
        env = {
            "ORCH_CONFORMANCE_ENV": name,
            "ORCH_CONFORMANCE_RAY": "1" if ray else "0",
            "ORCH_CONFORMANCE_ADDRESS": launched.cluster.address,
            "ORCH_CONFORMANCE_SLEEP": f"{sleep_s:g}",
            "ORCH_CONFORMANCE_EXIT": str(PROBE_EXIT),
        }
        argv = [sys.executable, "-c", PROBE, str(spec)]
        return launched.provider.start_runtime(launched.cluster, argv, env, str(log)), log

    # --- without a cluster -----------------------------------------------------------------
    def test_it_declares_its_capabilities_and_has_their_methods(self, tmp_path: Path) -> None:
        provider = self.make_provider(tmp_path)
        cls = type(provider)
        assert isinstance(cls.capabilities, frozenset) and cls.capabilities <= set(Capability)
        assert provider.capabilities == cls.capabilities, "declared on the class, read before a provider is made"
        for capability, methods in CAPABILITY_METHODS.items():
            has = [m for m in methods if callable(getattr(provider, m, None))]
            if capability in cls.capabilities:
                assert has == list(methods), f"{cls.name} declares {capability} without {set(methods) - set(has)}"
            else:
                assert not has, f"{cls.name} has {has} but does not declare {capability}"

    def test_its_precheck_returns_for_its_regions(self, tmp_path: Path) -> None:
        self.make_provider(tmp_path).precheck(self.config().candidate_regions())

    def test_its_plan_names_every_candidate_region_and_launches_nothing(self, tmp_path: Path) -> None:
        provider = self.make_provider(tmp_path)
        cfg = self.config()
        out = tmp_path / "plan"
        plan = provider.plan(cfg, "conformance-plan", str(out))
        assert isinstance(plan, Plan) and plan.lines and all(isinstance(line, str) for line in plan.lines)
        said = "\n".join([*plan.lines, *plan.errors])
        assert all(region in said for region in cfg.candidate_regions()), said
        assert all(line.startswith("error: ") for line in plan.errors)
        assert all(Path(p).parent == out for p in plan.files), "its files go in the plan's folder"
        assert not out.exists(), "the command writes the plan's files, not the provider"

    # --- on the class's cluster (launched by the first test that asks) -----------------------
    def test_a_launched_cluster_is_up_and_found_again_from_the_providers_records(self, launched: Launched) -> None:
        provider, cluster = launched.provider, launched.cluster
        assert (cluster.name, cluster.region, cluster.provider) == (cluster.name, launched.region.name, provider.name)
        check = provider.health(cluster)
        assert check.health is Health.UP, check
        found = provider.find(cluster.name)
        assert found is not None and (found.name, found.region, found.address) == (
            cluster.name,
            cluster.region,
            cluster.address,
        )
        if Capability.KEEPS_RUNTIME in provider.capabilities:
            assert provider.in_use(cluster.name)  # type: ignore[attr-defined]

    def test_the_runtime_reaches_the_clusters_ray_and_its_exit_status_is_the_runtimes(self, launched: Launched) -> None:
        provider, region = launched.provider, launched.region
        proc, log = self.start_probe(launched, "probe", ray=True)
        if Capability.LOCAL_PROCESSES in provider.capabilities:
            wait_line(log, "conformance: started", proc, self.runtime_timeout_s)
            pids = provider.processes(launched.cluster)
            assert proc.pid in pids and all(psutil.pid_exists(p) for p in pids), (proc.pid, pids)
        assert wait_exit(proc, self.runtime_timeout_s) == PROBE_EXIT, log.read_text(errors="replace")[-3000:]
        seen = json.loads(wait_line(log, "conformance: {", proc, 5).split("conformance: ", 1)[1])
        assert seen == {"env": "probe", "cpus": region.num_cpus * region.nodes, "nodes": region.nodes}
        assert provider.reattach(launched.cluster, proc) is None, "the runtime's own status: nothing to follow"

    def test_nodes_reports_each_worker_node_or_none_where_it_cannot_tell_them_apart(self, launched: Launched) -> None:
        checks = launched.provider.nodes(launched.cluster)
        assert all(isinstance(c, NodeCheck) for c in checks)
        if Capability.NODES not in launched.provider.capabilities:
            assert checks == []
            return
        assert [(c.index, c.health) for c in checks] == [(i, Health.UP) for i in range(1, launched.region.nodes)]

    def test_a_lost_worker_node_is_replaced_or_refused_as_no_capacity(self, launched: Launched) -> None:
        provider, cluster = launched.provider, launched.cluster
        if Capability.REPLACE_NODE not in provider.capabilities:
            with pytest.raises(ProvisionError) as refused:
                provider.replace_node(cluster, 1, 5.0)
            assert refused.value.kind is ProvisionErrorKind.NO_CAPACITY
            return
        assert launched.region.nodes >= 2, "a provider that declares REPLACE_NODE is tested on a region of 2 nodes"
        provider.replace_node(cluster, 1, self.launch_timeout_s)
        assert [(c.index, c.health) for c in provider.nodes(cluster)][:1] == [(1, Health.UP)]

    def test_a_cut_connection_is_followed_again_to_the_runtimes_status(self, launched: Launched) -> None:
        provider = launched.provider
        if Capability.CUT_CONNECTION not in provider.capabilities:
            offered = callable(getattr(provider, "cut_connection", None))
            assert not offered, "it cuts connections: declare CUT_CONNECTION"
            return
        proc, log = self.start_probe(launched, "cut", ray=False, sleep_s=self.cut_runtime_s)
        wait_line(log, "conformance: {", proc, self.runtime_timeout_s)
        assert provider.cut_connection(launched.cluster) >= 1  # type: ignore[attr-defined]
        lost = wait_exit(proc, 30.0)
        assert lost is not None and lost != PROBE_EXIT, "a cut connection ends, and says nothing of the runtime"
        again = provider.reattach(launched.cluster, proc)
        assert again is not None, "the runtime still runs: a new connection follows it"
        assert wait_exit(again, self.runtime_timeout_s) == PROBE_EXIT

    def test_a_worker_that_is_not_the_clusters_is_never_killed(self, launched: Launched) -> None:
        provider = launched.provider
        if Capability.KILL_WORKER not in provider.capabilities:
            assert not callable(getattr(provider, "kill_worker", None)), "it kills workers: declare KILL_WORKER"
            return
        # pid 1 is every machine's init: never a process of a cluster.
        why = provider.kill_worker(launched.cluster, 1)  # type: ignore[attr-defined]
        assert isinstance(why, str) and why

    def test_its_logs_are_kept_or_it_says_why_not(self, launched: Launched) -> None:
        kept = launched.provider.keep_logs(launched.cluster, str(launched.work / "kept"))
        assert isinstance(kept, KeptLogs)

    # --- last: the class's cluster goes --------------------------------------------------------
    def test_zz_teardown_leaves_the_cluster_gone_and_may_be_repeated(self, launched: Launched) -> None:
        provider, cluster = launched.provider, launched.cluster
        if Capability.KILL_CLUSTER in provider.capabilities:
            # Lost as a region is lost (chaos kill_region off this machine): gone once it
            # answers, then torn down as a lost cluster is.
            assert provider.kill_cluster(cluster) is None  # type: ignore[attr-defined]
            deadline = time.monotonic() + 60
            while provider.health(cluster).health is Health.UP and time.monotonic() < deadline:
                time.sleep(1)
            assert provider.health(cluster).health is not Health.UP, "killed, and still UP a minute later"
        else:
            assert not callable(getattr(provider, "kill_cluster", None)), "it kills clusters: declare KILL_CLUSTER"
        provider.teardown(cluster)
        assert provider.health(cluster).health is not Health.UP
        assert provider.find(cluster.name) is None
        provider.teardown(cluster)  # already gone: not an error
        if Capability.KEEPS_RUNTIME in provider.capabilities:
            assert not provider.in_use(cluster.name)  # type: ignore[attr-defined]
