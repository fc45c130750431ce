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


# --- capabilities ------------------------------------------------------------------------------


def test_every_fault_that_needs_a_capability_is_a_fault_kind_and_each_option_names_some() -> None:
    from orchestrator.wire.faults import FaultKind
    from providers.base import FAULT_NEEDS

    assert set(FAULT_NEEDS) <= set(FaultKind)
    assert all(options and all(options) for options in FAULT_NEEDS.values())


def test_a_fault_is_refused_in_one_line_naming_the_capability_and_the_provider() -> None:
    from providers.base import Capability, fault_refusal

    remote = frozenset({Capability.KILL_WORKER, Capability.CUT_CONNECTION})
    assert fault_refusal("kill_region", "sky", remote) == (
        "kill_region needs the provider capabilities local_processes or kill_cluster, which provider sky lacks"
    )
    assert fault_refusal("kill_node", "sky", remote) == (
        "kill_node needs the provider capabilities local_processes and nodes, which provider sky lacks"
    )
    assert fault_refusal("kill_worker", "sky", remote) is None, "killed where it runs"
    assert fault_refusal("kill_region", "sky", remote | {Capability.KILL_CLUSTER}) is None, "an allocation cancelled"
    assert fault_refusal("hang_region", "sky", remote) == (
        "hang_region needs the provider capabilities local_processes or freeze_cluster, which provider sky lacks"
    )
    for kind in ("hang_region", "partition_region"):
        assert fault_refusal(kind, "sky", remote | {Capability.FREEZE_CLUSTER}) is None, "an allocation frozen"
    assert fault_refusal("partition", "sky", remote | {Capability.FREEZE_CLUSTER}) is not None, "the driver's own"
    assert fault_refusal("kill_worker", "none", frozenset()) == (
        "kill_worker needs the provider capabilities local_processes or kill_worker, which provider none lacks"
    )
    for kind in ("status_flap", "corrupt_checkpoint", "user_error", "controller_crash", "storage_outage"):
        assert fault_refusal(kind, "none", frozenset()) is None, kind


def test_each_capability_with_methods_has_a_protocol_that_declares_them() -> None:
    from providers import base

    protocols = {
        base.Capability.KILL_WORKER: base.KillsWorker,
        base.Capability.KILL_CLUSTER: base.KillsCluster,
        base.Capability.FREEZE_CLUSTER: base.FreezesCluster,
        base.Capability.CUT_CONNECTION: base.CutsConnection,
        base.Capability.TOKEN_KEY: base.UsesTokenKey,
        base.Capability.KEEPS_RUNTIME: base.KeepsRuntime,
    }
    assert set(protocols) == set(base.CAPABILITY_METHODS)
    for capability, methods in base.CAPABILITY_METHODS.items():
        assert all(callable(getattr(protocols[capability], m, None)) for m in methods), capability
