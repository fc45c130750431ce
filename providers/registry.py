"""Providers by the name ``cloud.provider`` uses, and the checks of a run's config that
depend on its provider (its regions, what its faults need of it)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from orchestrator.errors import ConfigError
from providers.base import Capability, Provider, fault_refusal

# Each provider's class, "module:Class", imported only when a run's cloud uses it (SkyPilot's
# SDK is imported later still, on first use: launch, precheck, plan).
CLASSES = {
    "local": "providers.local.provider:LocalProvider",
    "skypilot": "providers.skypilot.provider:SkyPilotProvider",
}


class UnknownProvider(KeyError):
    pass


def provider_class(name: str) -> Any:
    """The class of provider ``name``; UnknownProvider naming the known ones."""
    try:
        module, cls = CLASSES[name].split(":")
    except KeyError:
        raise UnknownProvider(f"cloud.provider: got {name!r}; known providers: {', '.join(CLASSES)}") from None
    return getattr(importlib.import_module(module), cls)


def capabilities_of(name: str) -> frozenset[Capability]:
    """What provider ``name`` declares it can do beyond the Provider protocol."""
    return frozenset(provider_class(name).capabilities)


def _local(home: str | None, cloud: Any = None, job: Any = None) -> Provider:
    return provider_class("local")(  # type: ignore[no-any-return]
        state_dir=os.path.join(home, "clusters") if home else None,
        code_dir=getattr(job, "code_dir", "") or "",
        dashboard=bool(getattr(cloud, "dashboard", False)),
    )


def _skypilot(home: str | None, cloud: Any = None, job: Any = None) -> Provider:
    return provider_class("skypilot")(  # type: ignore[no-any-return]
        regions=dict(cloud.regions) if cloud is not None else {},
        state_dir=os.path.join(home, "clusters") if home else None,
        # job.code_dir: synced to every node and first on their PYTHONPATH.
        code_dir=getattr(job, "code_dir", "") or "",
        control_store=getattr(cloud, "control_store", None),
        dashboard=bool(getattr(cloud, "dashboard", False)),
    )


PROVIDERS: dict[str, Callable[[str | None, Any, Any], Provider]] = {"local": _local, "skypilot": _skypilot}


# Checks a provider makes of its regions at config time (no SDK, no credentials): the
# function's "module:name", imported only when a run's cloud uses that provider, called
# as f(name, region, trainer) for each of cloud.regions, with the run's TrainerConfig for
# a region the run may use and None for the others.
REGION_CHECKS = {
    "local": "providers.local.provider:validate_region",
    "skypilot": "providers.skypilot.regions:validate_region",
}
# A provider's own check of one fault its capabilities allow (``(fault, cfg)``: the
# problem, or None), where what it can do depends on the regions' clouds.
FAULT_CHECKS = {
    "skypilot": "providers.skypilot.regions:fault_problem",
}


def _hook(table: dict[str, str], provider: str) -> Callable[..., Any] | None:
    """A provider's check named ``module:function`` in ``table``, imported when asked for."""
    target = table.get(provider)
    if target is None:
        return None
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def check_config(cfg: Any) -> None:
    """Every check of the run's config that depends on its provider (ConfigError naming
    the key): its own checks of ``cloud.regions``, then ``chaos.faults`` against what it
    can do. The config's own checks (orchestrator.config.validate) know no provider."""
    check_regions(cfg)
    check_faults(cfg)


def check_regions(cfg: Any) -> None:
    """The run's provider's own checks of ``cloud.regions`` (ConfigError naming the key)."""
    check = _hook(REGION_CHECKS, cfg.cloud.provider)
    if check is None:
        return
    candidates = cfg.candidate_regions()
    for name, region in cfg.cloud.regions.items():
        check(name, region, cfg.trainer if name in candidates else None)


def check_faults(cfg: Any) -> None:
    """Each of ``chaos.faults`` against the run's provider's capabilities, before anything
    is launched: a fault it cannot carry out is a ConfigError naming the capability, the
    provider and the providers that have it."""
    if not cfg.chaos.faults:
        return
    name = str(cfg.cloud.provider)
    have = capabilities_of(name)
    for i, fault in enumerate(cfg.chaos.faults):
        problem = fault_refusal(str(fault.kind), name, have)
        if problem is not None:
            able = [other for other in CLASSES if fault_refusal(str(fault.kind), other, capabilities_of(other)) is None]
            fix = f"use a cloud whose provider has it ({', '.join(able)})" if able else "no provider has it"
            raise ConfigError(f"chaos.faults[{i}].kind", f"{problem}: drop the fault, or {fix}")
    check = _hook(FAULT_CHECKS, name)
    if check is None:
        return
    for i, fault in enumerate(cfg.chaos.faults):
        problem = check(fault, cfg)
        if problem is not None:
            raise ConfigError(f"chaos.faults[{i}].kind", problem)


def get_provider(name: str, home: str | None = None, cloud: Any = None, job: Any = None) -> Provider:
    """``home``: where the provider keeps its records of the clusters it launched;
    ``cloud``: the run's CloudConfig (its regions), for providers that need more than RegionSpec;
    ``job``: the run's JobConfig (its code_dir, which SkyPilot clusters sync)."""
    try:
        factory = PROVIDERS[name]
    except KeyError:
        raise UnknownProvider(f"cloud.provider: got {name!r}; known providers: {', '.join(PROVIDERS)}") from None
    return factory(home, cloud, job)
