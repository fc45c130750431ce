"""The catalog snapshot action=plan falls back on (providers/skypilot/catalog.py): which files
a plan needs, how the plan names its source, and that the shipped snapshot prices every
shipped cloud config and the documented override."""

from __future__ import annotations

import csv
import re

import pytest
import yaml

from providers.skypilot.catalog import SCHEMA, SNAPSHOT_ROOT, CatalogSource, needed_files, snapshot_date
from tests.support.paths import REPO

pytestmark = pytest.mark.unit


def test_a_cloud_with_a_csv_catalog_needs_its_vms_and_the_accelerator_list() -> None:
    assert needed_files({"GCP", "AWS"}) == ["common/accelerators.csv", "aws/vms.csv", "gcp/vms.csv"]
    assert needed_files({"Slurm", "Kubernetes"}) == []


def test_the_plan_names_the_snapshot_its_date_and_why() -> None:
    assert CatalogSource().describe() == "SkyPilot's (~/.sky/catalogs)"
    text = CatalogSource(["aws/vms.csv"], "SkyPilot could not fetch its own: ConnectionError", "2026-12-03").describe()
    assert text == (
        "the snapshot of 2026-12-03 shipped with orchestrator for aws/vms.csv "
        "(SkyPilot could not fetch its own: ConnectionError)"
    )


def test_the_snapshot_has_a_date() -> None:
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", snapshot_date())


def _rows(name: str) -> list[dict[str, str]]:
    with open(SNAPSHOT_ROOT / SCHEMA / name, encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_the_snapshot_prices_every_shipped_cloud_region() -> None:
    have = {(r["InstanceType"], r["Region"]) for f in ("aws/vms.csv", "gcp/vms.csv") for r in _rows(f)}
    missing = []
    for path in sorted((REPO / "conf" / "cloud").glob("*.yaml")):
        conf = yaml.safe_load(path.read_text())
        for name, rc in (conf.get("regions") or {}).items():
            cloud, _, region = str(rc.get("infra", "")).partition("/")
            if cloud in ("aws", "gcp") and (rc["instance_type"], region) not in have:
                missing.append(f"{path.name}: {name} ({rc['instance_type']} in {region})")
    assert not missing, missing
    # The documented override: an A10G instance in us-east-1.
    gpus = {(r["InstanceType"], r["AcceleratorName"], r["Region"]) for r in _rows("aws/vms.csv")}
    assert ("g5.xlarge", "A10G", "us-east-1") in gpus
    assert {r["AcceleratorName"] for r in _rows("common/accelerators.csv")} >= {"A10G"}
