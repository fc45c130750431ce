"""What a machine installs: the extras per cloud and store, their pins, and a cloud node's
set-up, which installs the filesystems of the run's stores."""

from __future__ import annotations

import re
import tomllib

import pytest

from providers.skypilot.task import default_setup, node_extras, task_config
from tests.support.paths import REPO

pytestmark = pytest.mark.unit


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_each_cloud_has_an_extra_with_its_sdk_and_its_stores_filesystem() -> None:
    extras = _project()["optional-dependencies"]
    assert extras["s3"] == ["s3fs"] and extras["gcs"] == ["gcsfs"]
    assert "skypilot[aws,slurm]==0.14.1" in extras["aws"] and "s3fs" in extras["aws"]
    assert "skypilot[gcp,slurm]==0.14.1" in extras["gcp"] and "gcsfs" in extras["gcp"]


def test_every_requirement_of_the_project_and_its_extras_is_pinned() -> None:
    project = _project()
    wanted = {_name(r) for r in project["dependencies"]}
    wanted |= {_name(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    pins = {
        _name(line)
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert wanted - pins == set()
    # The cloud SDKs the aws and gcp extras pull in: pinned too, not left to the day's index.
    assert {"awscli", "google-api-python-client", "google-auth-httplib2", "httplib2"} <= pins


def test_a_node_installs_the_filesystems_of_the_runs_stores() -> None:
    assert node_extras(["file:///srv/stores", ""]) == ()
    assert node_extras(["s3://bucket/stores", "file:///x"]) == ("s3",)
    assert node_extras(["gs://a/stores", "s3://b/control", "gcs://c"]) == ("gcs", "s3")
    setup = default_setup(("gcs", "s3"))
    assert setup.endswith("~/orch-venv/bin/pip install -q -c constraints.txt '.[gcs,s3]'")
    # The pins as they are (torch has no local label to strip any more).
    assert "grep" not in setup and default_setup(()).endswith("-c constraints.txt .")


def test_a_skypilot_task_carries_the_extras_unless_the_region_has_its_own_setup() -> None:
    from orchestrator.config.compose import compose

    regions = compose(["cloud=aws"]).cloud.regions
    name, rc = next(iter(regions.items()))
    config = task_config(name, rc, "c", workdir=str(REPO), extras=("s3",))
    assert config["setup"] == (rc.setup or default_setup(("s3",)))
    # The provider names them from the stores of cloud=aws (s3://): every task it makes.
    import io

    from providers.skypilot.provider import SkyPilotProvider

    provider = SkyPilotProvider(regions, out=io.StringIO())
    assert provider.extras == ("s3",)
    task, _ = provider.task_for(name, "c")
    assert task["setup"] == (rc.setup or default_setup(("s3",)))
