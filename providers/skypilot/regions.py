"""A SkyPilot region's checks at config time (``providers.registry.REGION_CHECKS``) and the
cloud its ``infra`` names. Needs no SkyPilot."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.config.schema import RegionConfig, TrainerConfig

# infra prefixes SkyPilot takes, and the cloud each stands for (sky.clouds class names).
INFRA_CLOUDS = {"aws": "AWS", "gcp": "GCP", "slurm": "Slurm", "k8s": "Kubernetes", "kubernetes": "Kubernetes"}


def validate_region(name: str, rc: RegionConfig, trainer: TrainerConfig | None) -> None:
    """Checks of a SkyPilot region that need no SkyPilot; ConfigError names the key.
    ``trainer``: the run's, for a region the run may use (None: one it will not)."""
    from orchestrator.errors import ConfigError

    key = f"cloud.regions.{name}"
    prefix = rc.infra.split("/", 1)[0].lower()
    if not rc.infra or prefix not in INFRA_CLOUDS:
        raise ConfigError(
            f"{key}.infra",
            f"got {rc.infra!r}; expected <cloud>/<region> with cloud one of {', '.join(INFRA_CLOUDS)}, "
            "e.g. aws/us-east-1, gcp/us-central1, slurm/<cluster in ~/.slurm/config>, k8s/<context>",
        )
    if rc.num_nodes < 1:
        raise ConfigError(f"{key}.num_nodes", f"got {rc.num_nodes}; expected an integer >= 1")
    if rc.disk_size < 0:
        raise ConfigError(f"{key}.disk_size", f"got {rc.disk_size}; expected GB >= 0 (0: SkyPilot's default)")
    if rc.accelerators and not re.fullmatch(r"[A-Za-z0-9_.-]+(:\d+(\.\d+)?)?", rc.accelerators):
        raise ConfigError(f"{key}.accelerators", f"got {rc.accelerators!r}; expected NAME or NAME:COUNT, e.g. A10G:1")
    if trainer is not None and trainer.gpus_per_worker > 0 and not rc.accelerators:
        raise ConfigError(
            f"{key}.accelerators",
            f"trainer.gpus_per_worker={trainer.gpus_per_worker:g} needs GPUs on the nodes; set the "
            "region's accelerators (e.g. A10G:1) or trainer.gpus_per_worker=0",
        )


def cloud_of(rc: RegionConfig) -> str:
    """The sky.clouds class name of a region ("AWS", "GCP", "Slurm", "Kubernetes")."""
    return INFRA_CLOUDS[rc.infra.split("/", 1)[0].lower()]


# The faults SkyPilot carries out on a Slurm allocation only, and how.
SLURM_ONLY = {
    "kill_region": "cancels a Slurm allocation (scancel)",
    "hang_region": "freezes a Slurm allocation (scancel --signal=STOP)",
    "partition_region": "freezes a Slurm allocation, then continues it (scancel --signal=STOP, CONT)",
}


def fault_problem(fault: object, cfg: object) -> str | None:
    """A fault SkyPilot's capabilities allow but a region's cloud cannot carry out
    (``providers.registry.FAULT_CHECKS``): kill_region, hang_region and partition_region
    act on a Slurm allocation, and a cloud's cluster is not lost or frozen on purpose
    here. The regions it may strike: the fault's ``region``, else every candidate."""
    kind = str(getattr(fault, "kind", ""))
    how = SLURM_ONLY.get(kind)
    if how is None:
        return None
    regions = cfg.cloud.regions  # type: ignore[attr-defined]
    named = getattr(fault, "region", None)
    names = [named] if named else list(cfg.candidate_regions())  # type: ignore[attr-defined]
    other = [n for n in names if n in regions and cloud_of(regions[n]) != "Slurm"]
    if not other:
        return None
    return (
        f"{kind} on SkyPilot {how}; region {other[0]} is on "
        f"{regions[other[0]].infra}: aim the fault at a Slurm region (its region key), or drop it"
    )
