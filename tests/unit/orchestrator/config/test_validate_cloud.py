"""cloud.* checks: regions, their stores and options, node counts; each refusal names its key."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.schema import Config, RegionConfig
from orchestrator.config.validate_cloud import validate_cloud
from orchestrator.errors import ConfigError
from tests.unit.orchestrator.config.test_validate import config

pytestmark = pytest.mark.unit


def _with_region(tmp_path: Path, **fields: object) -> Config:
    cfg = config(tmp_path)
    region = replace(RegionConfig(store=f"file://{tmp_path}/a"), **fields)  # type: ignore[arg-type]
    return replace(cfg, cloud=replace(cfg.cloud, regions={"a": region}))


def test_a_sound_cloud_passes(tmp_path: Path) -> None:
    validate_cloud(config(tmp_path))


@pytest.mark.parametrize(
    ("fields", "key", "words"),
    [
        ({"store": "memory://x"}, "cloud.regions.a.store", ""),
        ({"store": "relative/path"}, "cloud.regions.a.store", ""),
        ({"num_cpus": 0}, "cloud.regions.a.num_cpus", ">= 1"),
        ({"nodes": 2, "num_nodes": 3}, "cloud.regions.a.nodes", "name the same count"),
        ({"storage_options": {"secret": "hunter2"}}, "cloud.regions.a.storage_options", ""),
    ],
)
def test_each_refusal_names_its_key(tmp_path: Path, fields: dict[str, object], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_cloud(_with_region(tmp_path, **fields))
    assert err.value.key.startswith(key) and words in str(err.value) and "hunter2" not in str(err.value)


def test_no_region_and_a_region_name_that_is_a_path_are_refused(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    with pytest.raises(ConfigError, match="defines no region") as err:
        validate_cloud(replace(cfg, cloud=replace(cfg.cloud, regions={})))
    assert err.value.key == "cloud.regions"
    bad = replace(cfg, cloud=replace(cfg.cloud, regions={"../up": RegionConfig(store=f"file://{tmp_path}/a")}))
    with pytest.raises(ConfigError, match="region names are at most"):
        validate_cloud(bad)
