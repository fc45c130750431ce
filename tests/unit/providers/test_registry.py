"""Providers by name (providers/registry.py): an unknown one named with the known ones, and each
provider's own checks of the regions."""

from __future__ import annotations

import pytest

from orchestrator.config.compose import compose
from providers.registry import PROVIDERS, REGION_CHECKS, UnknownProvider, check_regions, get_provider

pytestmark = pytest.mark.unit


def test_an_unknown_provider_is_named_with_the_known_ones() -> None:
    with pytest.raises(UnknownProvider) as info:
        get_provider("nimbus")
    message = info.value.args[0]
    assert message.startswith("cloud.provider: got 'nimbus'") and all(name in message for name in PROVIDERS)


def test_each_region_check_is_a_module_function_of_a_known_provider() -> None:
    assert set(REGION_CHECKS) <= set(PROVIDERS)
    assert all(target.count(":") == 1 for target in REGION_CHECKS.values())


def test_the_local_providers_regions_pass_its_checks() -> None:
    check_regions(compose(["cloud=local"]))


def test_every_provider_has_a_class_that_declares_its_capabilities_and_their_methods() -> None:
    from providers.base import CAPABILITY_METHODS, Capability
    from providers.registry import CLASSES, capabilities_of, provider_class

    assert set(CLASSES) == set(PROVIDERS)
    for name in CLASSES:
        cls = provider_class(name)
        assert cls.name == name and capabilities_of(name) <= set(Capability)
        for capability, methods in CAPABILITY_METHODS.items():
            has = all(callable(getattr(cls, m, None)) for m in methods)
            assert has == (capability in cls.capabilities), f"{name}: {capability} declared and its methods disagree"


def test_a_fault_the_provider_cannot_carry_out_is_refused_before_launch_naming_the_fix() -> None:
    from orchestrator.errors import ConfigError
    from providers.registry import check_config

    cfg = compose(["cloud=aws", "chaos.faults=[{kind:status_flap,at_step:5},{kind:kill_region,at_step:10}]"])
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    assert info.value.key == "chaos.faults[1].kind"
    assert str(info.value) == (
        "chaos.faults[1].kind: kill_region on SkyPilot cancels a Slurm allocation (scancel); region "
        "us-east-1 is on aws/us-east-1: aim the fault at a Slurm region (its region key), or drop it"
    )
    cfg = compose(["cloud=aws", "chaos.faults=[{kind:hang_region,at_step:10}]"])
    with pytest.raises(ConfigError, match=r"hang_region on SkyPilot freezes a Slurm allocation \(scancel --signal"):
        check_config(cfg)
    cfg = compose(["cloud=aws", "chaos.faults=[{kind:partition,at_step:10}]"])
    with pytest.raises(ConfigError, match=r"partition needs the provider capability local_processes, which "):
        check_config(cfg)
    check_config(compose(["cloud=onprem", "chaos.faults=[{kind:partition_region,at_step:10,duration_s:5}]"]))
    check_config(compose(["cloud=onprem", "chaos.faults=[{kind:kill_region,during:checkpoint_upload}]"]))
    check_config(compose(["cloud=aws", "chaos.faults=[{kind:kill_worker,at_step:10},{kind:ssh_drop,after_s:5}]"]))
    check_config(compose(["cloud=local", "chaos.faults=[{kind:kill_region,at_step:10}]"]))
