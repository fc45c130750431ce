"""The checks of cloud.* (orchestrator.config.validate_cloud): one store URL, one protocol."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.schema import Config, RegionConfig
from orchestrator.config.validate_cloud import _validate_options, _validate_url, validate_cloud
from orchestrator.errors import ConfigError
from tests.unit.orchestrator.config.test_validate import config

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("simplecache::s3://bucket/x", "'::' chains"),
        ("s3://bucket/x::file:///tmp", "'::' chains"),
        ("file:///tmp/x::memory://y", "'::' chains"),
        ("s3://bucket/file:///tmp/x", "one protocol"),
        ("file:///tmp/s3://bucket", "one protocol"),
    ],
)
def test_a_chained_or_doubled_store_url_is_refused(url: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        _validate_url("cloud.control_store", url, "s3://bucket/x")


@pytest.mark.parametrize("url", ["file:///tmp/x", "s3://bucket/x", "gs://bucket/x/y"])
def test_one_store_url_passes(url: str) -> None:
    _validate_url("cloud.control_store", url, "s3://bucket/x")


@pytest.mark.parametrize("timeout", [1e-300, 0, -1, 1e300, "3", True])
def test_op_timeout_s_is_a_duration(timeout: object) -> None:
    with pytest.raises(ConfigError, match="op_timeout_s"):
        _validate_options("cloud.control_options", {"op_timeout_s": timeout})


def test_a_customer_key_in_the_options_is_refused_naming_its_path() -> None:
    with pytest.raises(ConfigError) as err:
        _validate_options("cloud.control_options", {"s3_additional_kwargs": {"SSECustomerKey": "k"}})
    assert err.value.key == "cloud.control_options.s3_additional_kwargs.SSECustomerKey"


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


@pytest.mark.parametrize("spec", ["file:/etc/key", "cmd:vault read -field=key secret/orch", "env:MY_KEY"])
def test_a_control_key_source_passes(tmp_path: Path, spec: str) -> None:
    cfg = config(tmp_path)
    validate_cloud(replace(cfg, cloud=replace(cfg.cloud, control_key=spec)))


def test_a_control_key_that_names_no_source_is_refused_by_its_key(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    with pytest.raises(ConfigError) as err:
        validate_cloud(replace(cfg, cloud=replace(cfg.cloud, control_key="hunter2hunter2")))
    assert err.value.key == "cloud.control_key" and "env:VARNAME, file:PATH or cmd:COMMAND" in str(err.value)
