"""A SkyPilot region's checks at config time: each names the key it refuses."""

from __future__ import annotations

import pytest

from orchestrator.config.schema import RegionConfig, TrainerConfig
from orchestrator.errors import ConfigError
from providers.skypilot.regions import INFRA_CLOUDS, cloud_of, validate_region

pytestmark = pytest.mark.unit


def region(**kw: object) -> RegionConfig:
    return RegionConfig(store="s3://b/s", **{"infra": "aws/us-east-1", **kw})  # type: ignore[arg-type]


def test_a_good_region_passes_and_names_its_cloud() -> None:
    validate_region("r", region(accelerators="A10G:1"), TrainerConfig())
    assert cloud_of(region()) == "AWS" and cloud_of(region(infra="k8s/ctx")) == "Kubernetes"
    assert set(INFRA_CLOUDS.values()) == {"AWS", "GCP", "Slurm", "Kubernetes"}


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"infra": "azure/eastus"}, "cloud.regions.r.infra"),
        ({"infra": ""}, "cloud.regions.r.infra"),
        ({"num_nodes": 0}, "cloud.regions.r.num_nodes"),
        ({"disk_size": -1}, "cloud.regions.r.disk_size"),
        ({"accelerators": "A10G x1"}, "cloud.regions.r.accelerators"),
    ],
)
def test_a_bad_value_names_its_key(kw: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_region("r", region(**kw), None)
    assert info.value.key == key


def test_gpus_per_worker_needs_accelerators_only_in_a_region_the_run_may_use() -> None:
    trainer = TrainerConfig(gpus_per_worker=1)
    with pytest.raises(ConfigError, match="gpus_per_worker=1 needs GPUs"):
        validate_region("r", region(), trainer)
    validate_region("r", region(), None)
