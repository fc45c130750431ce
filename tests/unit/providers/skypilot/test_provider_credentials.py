"""The controller's store credentials go only to clusters of a run whose stores need
them: AWS keys to a run with an s3:// store or control store, to no other."""

from __future__ import annotations

import io

import pytest

from orchestrator.config.compose import compose
from providers.registry import get_provider
from providers.skypilot.credentials import forwarded_secrets
from providers.skypilot.provider import SkyPilotProvider

pytestmark = pytest.mark.unit
AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def test_only_s3_stores_take_aws_credentials() -> None:
    assert forwarded_secrets(["file:///srv/stores/a", "gs://bucket/stores", ""]) == ()
    assert forwarded_secrets(["gs://bucket/stores", "s3://bucket/control"]) == AWS


@pytest.mark.parametrize(
    ("overrides", "sent"),
    [
        (["cloud=onprem"], False),
        (["cloud=gcp"], False),
        (["cloud=aws"], True),
        (["cloud=onprem", "cloud.control_store=s3://bucket/control"], True),
    ],
)
def test_a_clusters_secrets_hold_aws_keys_only_when_a_store_needs_them(
    overrides: list[str], sent: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    cfg = compose(overrides)
    provider = get_provider("skypilot", None, cfg.cloud, cfg.job)
    assert isinstance(provider, SkyPilotProvider)
    provider.out = io.StringIO()
    region = next(iter(cfg.cloud.regions))
    config, secrets = provider.task_for(region, "c", {"HF_TOKEN": "tok"})
    assert secrets.get("HF_TOKEN") == "tok"
    assert ("AWS_SECRET_ACCESS_KEY" in secrets) is sent
    assert "s3cr3t-value" not in repr(config)
