"""The SkyPilot provider against the provider contract (tests/support/conformance.py), on
CI's one-node Slurm cluster (.ci/slurm/setup): one SkyPilot cluster in orch-slurm-a, shared
by the suite's tests, through the on-prem tests' SkyPilot API server (tests/support/onprem.py).
Skipped where the cluster is not up; failed instead under ORCHESTRATOR_STRICT_SKIPS=1 (CI)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.schema import Config
from providers.base import Provider, RegionSpec
from tests.support.conformance import Launched, ProviderConformance

pytestmark = [pytest.mark.onprem, pytest.mark.timeout(1200)]
REGION = "orch-slurm-a"


class TestSkyPilotConformance(ProviderConformance):
    launch_timeout_s = 900.0
    runtime_timeout_s = 300.0

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def on_slurm(cls, onprem: Any) -> Iterator[None]:
        """This process as the on-prem runs' controllers are: their environment (SkyPilot
        told to use the Slurm cloud, the session's API server port), read again by SkyPilot."""
        from tests.support.onprem import sky_reads_env

        with pytest.MonkeyPatch.context() as mp:
            for key in ("ORCHESTRATOR_HOME", "ORCH_ONPREM_SHARED", "SKYPILOT_GLOBAL_CONFIG"):
                mp.setenv(key, onprem.env[key])
            for key in ("SKYPILOT_API_SERVER_LOCAL_PORT", "SKYPILOT_DISABLE_USAGE_COLLECTION"):
                mp.setenv(key, onprem.env[key])
            sky_reads_env()
            yield
        sky_reads_env()

    def test_zz_teardown_leaves_the_cluster_gone_and_may_be_repeated(self, launched: Launched, onprem: Any) -> None:
        super().test_zz_teardown_leaves_the_cluster_gone_and_may_be_repeated(launched)
        assert not onprem.wait_squeue_empty(), "the cluster's Slurm allocation outlived its teardown"

    def make_provider(self, work: Path) -> Provider:
        from providers.skypilot.provider import SkyPilotProvider

        # The suite's output: SkyPilot's launch log is long, and pytest shows it on a failure.
        return SkyPilotProvider(self.config().cloud.regions, state_dir=str(work / "clusters"), out=_Echo())

    def region(self, work: Path) -> RegionSpec:
        rc = self.config().cloud.regions[REGION]
        return RegionSpec(REGION, rc.store, rc.num_cpus, nodes=rc.node_count())

    def config(self) -> Config:
        from tests.support.onprem import CLOUD

        return compose([*CLOUD, f"cloud.candidates=[{REGION}]"])


class _Echo(io.StringIO):
    """SkyPilot's lines, to pytest's captured stdout."""

    def write(self, s: str) -> int:
        print(s, end="", flush=True)
        return len(s)
