"""Providers by the name ``cloud.provider`` uses."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from providers.base import Provider


def _local(home: str | None, cloud: Any = None, job: Any = None) -> Provider:
    from providers.local.provider import LocalProvider

    return LocalProvider(
        state_dir=os.path.join(home, "clusters") if home else None,
        code_dir=getattr(job, "code_dir", "") or "",
        dashboard=bool(getattr(cloud, "dashboard", False)),
    )


def _skypilot(home: str | None, cloud: Any = None, job: Any = None) -> Provider:
    # SkyPilot itself is imported on first use (launch, plan), not here.
    from providers.skypilot.provider import SkyPilotProvider

    return SkyPilotProvider(
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


def check_regions(cfg: Any) -> None:
    """The run's provider's own checks of ``cloud.regions`` (ConfigError naming the key);
    the config's checks (orchestrator.config.schema.validate) know no provider."""
    target = REGION_CHECKS.get(cfg.cloud.provider)
    if target is None:
        return
    import importlib

    module, func = target.split(":")
    check = getattr(importlib.import_module(module), func)
    candidates = cfg.candidate_regions()
    for name, region in cfg.cloud.regions.items():
        check(name, region, cfg.trainer if name in candidates else None)


class UnknownProvider(KeyError):
    pass


def get_provider(name: str, home: str | None = None, cloud: Any = None, job: Any = None) -> Provider:
    """``home``: where the provider keeps its records of the clusters it launched;
    ``cloud``: the run's CloudConfig (its regions), for providers that need more than RegionSpec;
    ``job``: the run's JobConfig (its code_dir, which SkyPilot clusters sync)."""
    try:
        factory = PROVIDERS[name]
    except KeyError:
        raise UnknownProvider(f"cloud.provider: got {name!r}; known providers: {', '.join(PROVIDERS)}") from None
    return factory(home, cloud, job)
