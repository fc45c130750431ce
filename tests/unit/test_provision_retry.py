"""Transient provisioning errors are retried in one place (the attempt's launch); others are not."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import orchestrator.attempt as attempt
from orchestrator.compose import compose
from orchestrator.journal import Journal
from orchestrator.runtime.control import ControlChannel
from providers.base import ClusterHandle, ProvisionError, ProvisionErrorKind


class Flaky:
    name = "flaky"

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
    ctl = SimpleNamespace(
        cfg=compose([f"home={tmp_path}"]),
        provider=provider,
        journal=journal,
        control=ControlChannel(f"file://{tmp_path}/control"),
        stores={},
        run_id="r",
        proxies={},
        progress=SimpleNamespace(note=lambda text: None),
        cluster_name=lambda region, gen: f"r-{region}-g{gen}",
    )
    return attempt.AttemptRunner(ctl), journal  # type: ignore[arg-type]


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
