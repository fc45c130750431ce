"""The local provider against the provider contract (tests/support/conformance.py): one Ray
cluster of two 1-CPU nodes on this machine, shared by the suite's tests."""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.compose import compose
from orchestrator.config.schema import Config
from providers.base import Provider, RegionSpec
from providers.local.provider import LocalProvider
from tests.support.conformance import ProviderConformance


class TestLocalConformance(ProviderConformance):
    launch_timeout_s = 90.0
    cut_runtime_s = 3.0  # the connection is a process handle: cut and followed again at once

    def make_provider(self, work: Path) -> Provider:
        return LocalProvider(state_dir=str(work / "clusters"))

    def region(self, work: Path) -> RegionSpec:
        return RegionSpec("local-a", f"file://{work}/store", num_cpus=1, nodes=2)

    def config(self) -> Config:
        return compose(["cloud=local"])
