"""Transient provisioning errors are retried in one place (the attempt's launch); others are
not, and a launch past recovery.provision_timeout_s fails over after that one timeout."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

import orchestrator.control.attempt as attempt
from orchestrator.config.compose import compose
from orchestrator.control.context import RunContext
from orchestrator.runstate.journal import Journal
from orchestrator.wire.control import ControlChannel
from providers.base import PROVISION_FAILURE, Capability, ClusterHandle, ProvisionError, ProvisionErrorKind, RegionSpec
from recovery.detection import Failure, FailureKind
from recovery.policy import Action, Budgets, History, decide
from tests.support.fakecloud import FakeCloud, Script
from tests.unit.orchestrator.control.test_controller import RUN, _controller, _events, _live, _replayed


class Flaky:
    name = "flaky"
    capabilities: frozenset[Capability] = frozenset()

    def __init__(self, errors: list[ProvisionErrorKind]) -> None:
        self.errors = list(errors)
        self.launches = 0

    def launch(self, region, cluster_name, timeout_s, env=None):
        self.launches += 1
        if self.errors:
            raise ProvisionError(self.errors.pop(0), region.name, "no luck")
        return ClusterHandle(cluster_name, region.name, self.name, "127.0.0.1:1")


def _runner(tmp_path: Path, provider: Flaky) -> tuple[attempt.AttemptRunner, Journal]:
    journal = Journal(str(tmp_path / "journal.jsonl"))
    ctx = RunContext(
        run_id="r",
        run_dir=str(tmp_path),
        cfg=compose([f"home={tmp_path}"]),
        provider=provider,
        control=ControlChannel(f"file://{tmp_path}/control"),
        emit=journal.emit,
    )
    return attempt.AttemptRunner(ctx), journal


def test_transient_errors_are_retried_then_the_cluster_is_journaled(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(attempt, "PROVISION_BACKOFF_S", 0.0)
    provider = Flaky([ProvisionErrorKind.TRANSIENT, ProvisionErrorKind.TRANSIENT])
    runner, journal = _runner(tmp_path, provider)
    cluster = runner.launch("local-a", 1)
    assert cluster.name == "r-local-a-g1" and provider.launches == 3
    types = [e["type"] for e in journal.events()]
    assert types == ["provision_retry", "provision_retry", "provisioned"]


def test_retries_run_out_and_other_kinds_are_not_retried(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(attempt, "PROVISION_BACKOFF_S", 0.0)
    provider = Flaky([ProvisionErrorKind.TRANSIENT] * 3)
    runner, journal = _runner(tmp_path, provider)
    with pytest.raises(ProvisionError):
        runner.launch("local-a", 1)
    assert provider.launches == 3
    assert journal.events()[-1]["type"] == "provision_failed"

    provider = Flaky([ProvisionErrorKind.NO_CAPACITY])
    runner, _ = _runner(tmp_path / "b", provider)
    with pytest.raises(ProvisionError) as err:
        runner.launch("local-a", 1)
    assert err.value.kind is ProvisionErrorKind.NO_CAPACITY and provider.launches == 1


def test_a_launch_past_its_deadline_fails_over_after_one_timeout_not_three(tmp_path, monkeypatch) -> None:
    """The timeout is the provider's (SkyPilot's launch, cancelled at its deadline); the
    attempt does not retry it, and the policy moves the run to the next region."""
    monkeypatch.setattr(attempt, "PROVISION_BACKOFF_S", 0.0)
    provider = Flaky([ProvisionErrorKind.TIMEOUT])
    runner, journal = _runner(tmp_path, provider)
    with pytest.raises(ProvisionError) as err:
        runner.launch("local-a", 1)
    assert err.value.kind is ProvisionErrorKind.TIMEOUT and provider.launches == 1
    assert [e["type"] for e in journal.events()] == ["provision_failed"]
    assert PROVISION_FAILURE[err.value.kind] is FailureKind.PROVISION_TIMEOUT
    failure = Failure(FailureKind.PROVISION_TIMEOUT, "local-a", str(err.value))
    decision = decide(failure, ["local-a", "local-b"], History(), Budgets(2, 0, 600.0), now=0.0)
    assert (decision.action, decision.region) == (Action.FAILOVER, "local-b")


class _Sky:
    """SkyPilot's client as far as a launch goes: a request that never finishes until cancelled."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.launches = 0

    def launch(self, task, cluster_name):  # type: ignore[no-untyped-def]
        self.launches += 1
        self.cancelled.clear()
        return "req-1"

    def stream_and_get(self, request_id, output_stream=None):  # type: ignore[no-untyped-def]
        self.cancelled.wait(30)
        raise RuntimeError("cancelled")

    def api_cancel(self, request_id):  # type: ignore[no-untyped-def]
        self.cancelled.set()
        return "req-cancel"

    def get(self, request_id):  # type: ignore[no-untyped-def]
        return None


def test_skypilots_launch_is_cancelled_at_its_deadline_as_a_timeout(tmp_path, monkeypatch) -> None:
    import io

    from providers.skypilot.provider import SkyPilotProvider

    provider = SkyPilotProvider({}, out=io.StringIO())
    sky = _Sky()
    t0 = time.monotonic()
    with pytest.raises(ProvisionError) as err:
        provider._launch_within(sky, object(), "orch-x", 0.3, "us-east-1")
    assert err.value.kind is ProvisionErrorKind.TIMEOUT
    assert "recovery.provision_timeout_s" in str(err.value) and "us-east-1" in str(err.value)
    assert sky.cancelled.is_set() and sky.launches == 1 and time.monotonic() - t0 < 10
    # The whole launch: one sky.launch, then the run moves on (no retry of a timeout).
    monkeypatch.setattr(attempt, "PROVISION_BACKOFF_S", 0.0)

    class OneRegion(Flaky):
        def launch(self, region: RegionSpec, cluster_name, timeout_s, env=None):  # type: ignore[no-untyped-def]
            self.launches += 1
            provider._launch_within(sky, object(), cluster_name, 0.05, region.name)

    slow = OneRegion([])
    runner, _ = _runner(tmp_path, slow)
    with pytest.raises(ProvisionError):
        runner.launch("local-a", 1)
    assert slow.launches == 1 and sky.launches == 2


# --- a provider that keeps runtimes (SkyPilot): one cluster name per run and region, a
# lost cluster's runtime kept until the run ends, and the cluster of an attempt that
# ended by a failure restarted in place taken by the next attempt instead of a launch.


@dataclass
class KeepingCloud(FakeCloud):
    capabilities: ClassVar[frozenset[Capability]] = FakeCloud.capabilities | {Capability.KEEPS_RUNTIME}
    kept: list[str] = field(default_factory=list)
    swept: list[str] = field(default_factory=list)

    def teardown(self, cluster: ClusterHandle, keep_runtime: bool = False) -> bool:  # type: ignore[override]
        super().teardown(cluster)
        if keep_runtime:
            self.kept.append(cluster.name)
        return keep_runtime

    def in_use(self, cluster_name: str) -> bool:
        return cluster_name in self.clusters

    def sweep_runtime(self, cluster: ClusterHandle) -> None:
        self.swept.append(cluster.name)

    def start_runtime(self, cluster: ClusterHandle, argv: list[str], env: dict[str, str], log_path: str) -> Any:
        # A kept cluster runs the region's next script without a launch.
        if cluster.name not in self._pending:
            script = self.scripts.get(cluster.region) or [Script()]
            self._pending[cluster.name] = script.pop(0) if len(script) > 1 else script[0]
        return super().start_runtime(cluster, argv, env, log_path)


def test_a_user_error_restarts_on_the_same_cluster_without_a_launch(tmp_path: Path) -> None:
    cloud = KeepingCloud({"local-a": [Script(40, "user_error"), Script()]})
    ctl = _controller(tmp_path, cloud)
    result = ctl.run()
    assert result["status"] == "SUCCEEDED" and result["attempts"] == 2
    assert cloud.launched == [f"{RUN}-local-a"], "one launch, under the run's name for the region"
    (kept,) = _events(ctl, "cluster_kept")
    assert (kept["cluster"], kept["generation"], kept["failure"]) == (f"{RUN}-local-a", 1, "user_error")
    first, second = _events(ctl, "provisioned")
    assert first["cluster"] == second["cluster"] == f"{RUN}-local-a"
    assert "kept_from" not in first and second["kept_from"] == 1 and second["generation"] > 1
    # Torn down once, at the end, its runtime swept with it.
    assert cloud.torn_down == [f"{RUN}-local-a"] and not cloud.clusters
    assert cloud.swept == [f"{RUN}-local-a"] and [e["cluster"] for e in _events(ctl, "runtime_swept")] == cloud.swept
    assert _live(ctl) == _replayed(ctl)


def test_a_lost_cluster_is_not_kept_and_its_runtime_waits_for_a_return_until_the_run_ends(tmp_path: Path) -> None:
    cloud = KeepingCloud({"local-a": [Script(40, "cluster_lost")], "local-b": [Script()]})
    ctl = _controller(tmp_path, cloud)
    assert ctl.run()["status"] == "SUCCEEDED"
    assert not _events(ctl, "cluster_kept")
    assert cloud.launched == [f"{RUN}-local-a", f"{RUN}-local-b"]
    assert [t.get("runtime_kept") for t in _events(ctl, "teardown")] == [True, True]
    assert sorted(cloud.swept) == sorted(cloud.launched)
