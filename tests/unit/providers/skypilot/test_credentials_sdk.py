"""A cloud whose SDK or command is missing here is one line naming this project's extra for
it, not SkyPilot's own install hint: simulated with the modules hidden and a stand-in for
SkyPilot's cloud classes (nothing imported from SkyPilot, nothing run)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from orchestrator.commands.run import ProviderPrecheckFailed, provider_precheck
from orchestrator.config.compose import compose
from providers.base import ProvisionError
from providers.skypilot import credentials
from providers.skypilot.credentials import CLOUD_SDKS, missing_tools, precheck

pytestmark = pytest.mark.unit

SKYPILOTS_HINT = "GCP tools are not installed. Run the following commands:\n  $ pip install google-api-python-client"


class _Cloud:
    """SkyPilot's cloud class as precheck calls it; says what SkyPilot says without the SDK."""

    calls = 0

    @classmethod
    def check_credentials(cls, capability: object) -> tuple[bool, str]:
        cls.calls += 1
        return False, SKYPILOTS_HINT


@pytest.fixture
def sky(monkeypatch: pytest.MonkeyPatch) -> type[_Cloud]:
    """``import sky`` and ``from sky import clouds`` give a stand-in whose every cloud is _Cloud."""
    _Cloud.calls = 0
    clouds = types.ModuleType("sky.clouds")
    clouds.CloudCapability = types.SimpleNamespace(COMPUTE="compute")  # type: ignore[attr-defined]
    for name in CLOUD_SDKS:
        setattr(clouds, name, _Cloud)
    sky = types.ModuleType("sky")
    sky.clouds = clouds  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sky", sky)
    monkeypatch.setitem(sys.modules, "sky.clouds", clouds)
    return _Cloud


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed: no spec, no import


@pytest.mark.parametrize(
    ("cloud", "module", "extra"),
    [
        ("AWS", "boto3", "'.[aws]'"),
        ("GCP", "googleapiclient", "'.[gcp]'"),
        ("Slurm", "hostlist", "'.[skypilot]'"),
        ("Kubernetes", "kubernetes", "'.[skypilot]' 'skypilot[kubernetes]'"),
    ],
)
def test_a_missing_sdk_names_the_extra_of_that_cloud(
    cloud: str, module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without(monkeypatch, module)
    said = missing_tools(cloud)
    assert (
        said == f"its SDK is not installed (no module {module}); install it: pip install -c constraints.txt -e {extra}"
    )


def test_with_only_the_aws_extra_cloud_gcp_is_one_line_naming_the_gcp_extra(
    sky: type[_Cloud], monkeypatch: pytest.MonkeyPatch
) -> None:
    _without(monkeypatch, "googleapiclient")
    cfg = compose(["cloud=gcp"])
    with pytest.raises(ProviderPrecheckFailed) as caught:
        provider_precheck(cfg)
    line = str(caught.value)
    region = cfg.candidate_regions()[0]
    assert line.startswith(f"cloud.regions.{region}: SkyPilot cannot use GCP (gcp/")
    assert "pip install -c constraints.txt -e '.[gcp]'" in line and line.endswith("nothing was launched")
    assert "\n" not in line and "google-api-python-client" not in line and "conda" not in line
    assert sky.calls == 0, "SkyPilot's check, whose hint is its own, is not asked"


def test_with_the_sdk_here_skypilots_check_says_what_is_missing(
    sky: type[_Cloud], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(credentials, "missing_tools", lambda cloud: None)
    cfg = compose(["cloud=gcp"])
    with pytest.raises(
        ProvisionError,
        match=r"GCP tools are not installed\. Run the following commands: \$ pip install google-api-python-client",
    ):
        precheck({r: cfg.cloud.regions[r] for r in cfg.candidate_regions()})
    assert sky.calls == 1, "one check per cloud, for all its regions"


def test_a_missing_command_says_how_to_get_it_or_put_it_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(credentials, "_importable", lambda module: True)
    monkeypatch.setattr(credentials.shutil, "which", lambda command: None)
    monkeypatch.setattr(credentials.sys, "executable", str(tmp_path / "python"))
    assert missing_tools("AWS") == (
        "the aws command is not installed; pip install -c constraints.txt -e '.[aws]' (its awscli)"
    )
    assert "install the Google Cloud CLI, then gcloud init" in (missing_tools("GCP") or "")
    (tmp_path / "aws").write_text("")
    assert missing_tools("AWS") == (
        f"the aws command is not on PATH; activate the venv that has it or add {tmp_path} to PATH"
    )
    assert missing_tools("Slurm") is None
