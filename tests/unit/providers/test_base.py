"""What every provider shares (providers/base.py): provisioning errors and what each is to the policy."""

from __future__ import annotations

import pytest

from providers.base import PROVISION_FAILURE, ProvisionError, ProvisionErrorKind

pytestmark = pytest.mark.unit


def test_every_provisioning_error_kind_is_a_failure_the_policy_knows() -> None:
    assert set(PROVISION_FAILURE) == set(ProvisionErrorKind)
    assert len(set(PROVISION_FAILURE.values())) == len(ProvisionErrorKind)


def test_a_provisioning_error_names_its_region_and_keeps_its_kind() -> None:
    exc = ProvisionError(ProvisionErrorKind.NO_CAPACITY, "aws-east", "no m6i.large left")
    assert (str(exc), exc.kind, exc.region) == ("region aws-east: no m6i.large left", "no_capacity", "aws-east")
