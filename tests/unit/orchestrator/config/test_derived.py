"""derived: the workers a region fits, the run's last step, a store's plain-http endpoint."""

from __future__ import annotations

import pytest

from orchestrator.config.derived import proxy_target, region_workers, total_steps
from orchestrator.config.schema import Config, HpoConfig, JobConfig, RegionConfig, TrainerConfig

pytestmark = pytest.mark.unit


def test_region_workers_counts_cpus_and_gpus_of_every_node() -> None:
    trainer = TrainerConfig(workers=4, cpus_per_worker=1.0, gpus_per_worker=1.0)
    region = RegionConfig(store="file:///s", num_cpus=4, nodes=2, num_gpus=1)
    assert region_workers(region, trainer) == 2
    assert region_workers(region, trainer, gpus=False) == 8
    assert region_workers(RegionConfig(store="file:///s", num_cpus=8, accelerators="A10G:2"), trainer) == 2


def test_total_steps_is_the_jobs_or_the_searchs_last_step() -> None:
    assert total_steps(Config(job=JobConfig(name="j", steps=123))) == 123
    search = Config(job=JobConfig(name="j"), hpo=HpoConfig(enabled=True, num_samples=2, max_t=3))
    assert total_steps(search) > 3


@pytest.mark.parametrize(
    ("store", "options", "target"),
    [
        ("s3://b/p", {"endpoint_url": "http://127.0.0.1:9000"}, ("127.0.0.1", 9000)),
        ("gs://b/p", {"endpoint_url": "http://fake"}, ("fake", 80)),
        ("s3://b/p", {"endpoint_url": "https://secure"}, None),
        ("s3://b/p", {}, None),
        ("file:///x", {"endpoint_url": "http://h:1"}, None),
    ],
)
def test_proxy_target(store: str, options: dict[str, str], target: tuple[str, int] | None) -> None:
    assert proxy_target(RegionConfig(store=store, storage_options=options)) == target
