"""A region as the run's config describes it (``cloud.regions.<name>``), for every provider.

Here, not in the config module, so that a provider can read its regions without
importing the controller's config (the config imports the providers' region checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class RegionConfig:
    store: str = MISSING
    num_cpus: int = 2
    # cloud.provider=local: GPUs the region's Ray cluster offers (of this machine's).
    num_gpus: int = 0
    # fsspec options for the store (endpoint_url, config_kwargs, requests_timeout,
    # op_timeout_s...). Never credentials: those come from the environment.
    storage_options: dict[str, Any] = field(default_factory=dict)
    # SkyPilot regions (cloud.provider=skypilot): where and on what; see conf/cloud/aws.yaml.
    # infra: "aws/us-east-1", "gcp/us-central1", "slurm/<cluster in ~/.slurm/config>", "k8s/<context>".
    infra: str = ""
    instance_type: str = ""
    cpus: str = ""  # SkyPilot's syntax: "4", "4+"
    memory: str = ""  # GB, "16", "16+"
    accelerators: str = ""  # "A10G:1"
    use_spot: bool = False
    disk_size: int = 0  # GB; 0: SkyPilot's default
    num_nodes: int = 1
    # Commands run once on the nodes (install the project), and the Python that runs the
    # runtime there; empty: the provider's defaults (a venv built from constraints.txt).
    setup: str = ""
    python: str = ""
