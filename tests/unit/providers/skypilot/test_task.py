"""The SkyPilot task of a region's cluster, built without SkyPilot."""

from __future__ import annotations

import pytest

from orchestrator.config.schema import RegionConfig
from providers.skypilot.scripts import CODE_SETUP, RUN_SCRIPT
from providers.skypilot.task import (
    DEFAULT_PYTHON,
    REMOTE_CODE_DIR,
    dashboard_info,
    default_setup,
    node_dir,
    node_extras,
    resources_config,
    sky_cluster_name,
    task_config,
)

pytestmark = pytest.mark.unit


def region(**kw: object) -> RegionConfig:
    return RegionConfig(store="s3://b/s", **{"infra": "aws/us-east-1", **kw})  # type: ignore[arg-type]


def test_the_task_carries_the_regions_resources_envs_and_run_script() -> None:
    config = task_config("r", region(use_spot=True, cpus="4+"), "Run_1-r-g1", {"A": "1"}, workdir="/w", ray_port=21000)
    assert config["name"] == "run-1-r-g1" and config["workdir"] == "/w" and config["run"] == RUN_SCRIPT
    assert config["resources"] == {"infra": "aws/us-east-1", "cpus": "4+", "use_spot": True}
    envs = config["envs"]
    assert envs["A"] == "1" and envs["ORCH_RAY_PORT"] == "21000" and envs["ORCH_PYTHON"] == DEFAULT_PYTHON
    assert envs["ORCH_NODE_DIR"] == node_dir("Run_1-r-g1") and "ORCH_DASHBOARD_PORT" not in envs
    assert "secrets" not in config and "file_mounts" not in config


def test_secrets_by_name_only_and_code_dir_synced_with_its_setup(tmp_path: object) -> None:
    config = task_config("r", region(), "c", workdir="/w", secret_names=("TOKEN",), code_dir=str(tmp_path))
    assert config["secrets"] == {"TOKEN": None}
    assert config["file_mounts"] == {REMOTE_CODE_DIR: str(tmp_path)}
    assert config["envs"]["ORCH_CODE_DIR"] == REMOTE_CODE_DIR and config["setup"].endswith(CODE_SETUP)


def test_names_and_folders() -> None:
    assert sky_cluster_name("9-run") == "c-9-run" and sky_cluster_name("a.b__c") == "a-b-c"
    assert node_dir("x") == node_dir("x") != node_dir("y") and len(node_dir("x")) <= 20
    assert resources_config(region(disk_size=50, accelerators="A10G:1")) == {
        "infra": "aws/us-east-1",
        "accelerators": "A10G:1",
        "disk_size": 50,
    }
    assert dashboard_info("c", 8265, "/tmp/n")["dashboard"] == "http://127.0.0.1:8265"


def test_the_nodes_venv_gets_the_extras_its_stores_need() -> None:
    assert node_extras(["s3://a", "gs://b", "", "file:///c"]) == ("gcs", "s3")
    assert default_setup(("s3",)).endswith("-c constraints.txt '.[s3]'")
    assert default_setup().endswith("-c constraints.txt .")
