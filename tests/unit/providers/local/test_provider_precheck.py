"""The local provider's precheck (providers/local/provider.py): without Ray it is one line
saying what to install, before it looks at anything else."""

from __future__ import annotations

import importlib.util

import pytest

from providers.base import ProviderUnavailable
from providers.local.provider import LocalProvider

pytestmark = pytest.mark.unit


def test_without_ray_the_local_provider_cannot_work_here(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ProviderUnavailable, match=r"needs Ray: pip install -c constraints.txt -e \.$"):
        LocalProvider().precheck(["local-a"])


def test_a_malformed_port_range_is_one_line_before_any_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    from providers.base import ProvisionError, ProvisionErrorKind
    from providers.local.provider import PORTS_ENV

    monkeypatch.setenv(PORTS_ENV, "26000")
    with pytest.raises(ProvisionError) as err:
        LocalProvider().precheck(["local-a"])
    assert err.value.kind is ProvisionErrorKind.PRECHECK and f"{PORTS_ENV}='26000'" in str(err.value)
