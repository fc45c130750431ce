"""``action=plan`` as documented, offline and without credentials: every plan command the
README, the clouds guide and the cloud configs show, and each shipped cloud, with a fresh
HOME (no SkyPilot catalogs: SkyPilot cannot fetch them here, so the shipped snapshot prices
them; where it can, its own do). A region the config lists that cannot run the job fails the
plan with one line saying why."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")

_DOCS = (REPO / "README.md", REPO / "docs" / "guides" / "clouds-and-slurm.md")


def documented_plans() -> list[tuple[str, ...]]:
    """The overrides of each documented plan command, and of each cloud config's override
    example (planned)."""
    found: list[tuple[str, ...]] = []
    for doc in _DOCS:
        for line in doc.read_text().splitlines():
            m = re.match(r"\s*(?:\$ )?python -m orchestrator (.*action=plan.*)$", line)
            if m:
                found.append(tuple(m.group(1).split()))
    for conf in sorted((REPO / "conf" / "cloud").glob("*.yaml")):
        for line in conf.read_text().splitlines():
            m = re.match(r"#\s+(cloud=\S+ .*)$", line)
            if m:
                found.append(("job=digits", *m.group(1).split(), "action=plan"))
    shipped = [("job=digits", f"cloud={c}", "action=plan") for c in ("aws", "gcp", "multi")]
    return list(dict.fromkeys([*found, *shipped]))


def plan(tmp_path: Path, args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "SKY_"))}
    env.update(HOME=str(tmp_path / "user"), ORCHESTRATOR_HOME=str(tmp_path / "home"), AWS_EC2_METADATA_DISABLED="true")
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_docs_show_the_override_example() -> None:
    assert any("accelerators=A10G:1" in " ".join(a) for a in documented_plans())


@pytest.mark.parametrize("args", documented_plans(), ids=" ".join)
def test_a_documented_plan_succeeds_offline(tmp_path: Path, args: tuple[str, ...]) -> None:
    proc = plan(tmp_path, args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "unavailable" not in proc.stdout
    catalogs = [line for line in proc.stdout.splitlines() if line.startswith("catalogs ")]
    assert len(catalogs) == 1, proc.stdout
    assert "<sky-payload>" not in proc.stdout
    if "snapshot" in catalogs[0]:  # offline: read from a private copy, never put into the user's catalogs
        assert not list((tmp_path / "user").rglob("*.csv"))


def test_a_region_that_cannot_run_the_job_fails_the_plan_with_the_mismatch(tmp_path: Path) -> None:
    # A10G on the config's m6i.xlarge: SkyPilot's mismatch, on one line.
    proc = plan(tmp_path, ("job=digits", "cloud=aws", "action=plan", "cloud.regions.us-east-1.accelerators=A10G:1"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: cloud.regions.us-east-1: cannot run the job: ResourcesMismatchError")
    assert "Accelerators requested: {'A10G': 1}" in errors[0]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("1 "))
    assert "Accelerators for m6i.xlarge: None" in row
