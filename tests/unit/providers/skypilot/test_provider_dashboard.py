"""``cloud.dashboard``: each cluster's Ray dashboard on loopback, checked up to the clouds'
boundary. The SkyPilot task's run script runs here in bash (a fake Python records how Ray
would be started); the local provider's real clusters are in tests/integration."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.saved import config_from_plain
from orchestrator.control.wiring import build_controller
from orchestrator.wire.codec import to_plain
from providers.base import Capability, ClusterHandle, RegionSpec
from providers.local.provider import dashboard_flags
from providers.registry import get_provider
from providers.skypilot.provider import SkyPilotProvider

pytestmark = pytest.mark.unit


def test_ray_starts_without_a_dashboard_unless_asked_and_then_on_loopback_only() -> None:
    assert dashboard_flags(None) == ["--include-dashboard=false", "--no-api-server"]
    assert dashboard_flags(8265) == ["--include-dashboard=true", "--dashboard-host=127.0.0.1", "--dashboard-port=8265"]


def test_the_key_reaches_both_providers_and_a_config_from_before_it_resumes(tmp_path: Path) -> None:
    on = compose(["cloud=aws", "cloud.dashboard=true", "run_id=r1"])
    assert get_provider("local", str(tmp_path), on.cloud, on.job).dashboard is True  # type: ignore[attr-defined]
    assert get_provider("skypilot", str(tmp_path), on.cloud, on.job).dashboard is True  # type: ignore[attr-defined]
    # A run's config.json from before cloud.dashboard and metrics: no dashboard, TensorBoard on.
    saved = json.loads(json.dumps(to_plain(on)))
    del saved["cloud"]["dashboard"], saved["metrics"]
    back = config_from_plain(saved)
    assert back.cloud.dashboard is False and back.metrics.tensorboard is True


def test_a_skypilot_cluster_says_where_its_dashboard_is_and_how_to_reach_it(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    out = io.StringIO()
    provider = SkyPilotProvider(compose(["cloud=aws"]).cloud.regions, out=out, dashboard=True)
    tasks: list[dict[str, Any]] = []
    monkeypatch.setattr("providers.skypilot.provider.build_task", lambda config, secrets=None: tasks.append(config))
    monkeypatch.setattr(SkyPilotProvider, "_launch_within", lambda self, *a: None)
    monkeypatch.setattr(SkyPilotProvider, "_wait_ready", lambda self, *a: None)
    monkeypatch.setattr("providers.skypilot.provider.name_on_cloud", lambda name: name)
    handle = provider.launch(RegionSpec("us-east-1", "s3://b/s", 2), "run-us-east-1-g1", 60.0)
    (config,) = tasks
    port = config["envs"]["ORCH_DASHBOARD_PORT"]
    assert port != config["envs"]["ORCH_RAY_PORT"]
    sky_name, node_dir = handle.info["sky_cluster"], handle.info["node_dir"]
    assert handle.info["dashboard"] == f"http://127.0.0.1:{port}"
    assert f"ssh -N -L {port}:127.0.0.1:{port} {sky_name}" in handle.info["dashboard_access"]
    assert f"ssh {sky_name} cat {node_dir}/auth_token" in handle.info["dashboard_access"]
    assert f"Ray dashboard on its head at http://127.0.0.1:{port}" in out.getvalue()


class _DashboardCloud:
    """A provider whose one cluster has a dashboard: what the attempt does with it."""

    name = "fake"
    capabilities: frozenset[Capability] = frozenset()

    def launch(self, region: RegionSpec, cluster_name: str, timeout_s: float, env: Any = None) -> ClusterHandle:
        info = {"dashboard": "http://127.0.0.1:8265", "dashboard_access": "its token: /x/auth_token"}
        return ClusterHandle(cluster_name, region.name, self.name, "fake://x", info)


def test_the_attempt_prints_and_journals_a_clusters_dashboard(tmp_path: Path) -> None:
    cfg = compose([f"home={tmp_path}", "run_id=d", "job.steps=10"])
    out = io.StringIO()
    ctl = build_controller(cfg, _DashboardCloud(), "d", out=out)  # type: ignore[arg-type]
    ctl.runner.launch("local-a", 1)
    (provisioned,) = [e for e in ctl.journal.events() if e["type"] == "provisioned"]
    assert provisioned["info"]["dashboard"] == "http://127.0.0.1:8265"
    assert "Ray dashboard of d-local-a-g1: http://127.0.0.1:8265 (its token: /x/auth_token)" in out.getvalue()
    ctl.metrics.close()
