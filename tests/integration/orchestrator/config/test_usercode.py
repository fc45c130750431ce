"""``job.code_dir``: the user's own code on the clusters, checked offline.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.compose import compose
from providers.skypilot.provider import SkyPilotProvider
from providers.skypilot.scripts import CODE_PATH, RUN_SCRIPT
from providers.skypilot.task import task_config
from tests.support.paths import REPO
from tests.unit.orchestrator.config.test_usercode import (
    EXAMPLE,
    _launched,
    onprem_region,
)

pytestmark = pytest.mark.integration

# A fake runtime Python: prints how it was called and with which PYTHONPATH.
FAKE_PYTHON = '#!/bin/sh\necho "argv: $*" >> "$(dirname "$0")/calls.txt"\necho "PYTHONPATH=$PYTHONPATH"\n'


def fake_python(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    py = folder / "python"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    return py


def bash(script: str, home: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ["PATH"], "HOME": str(home), **(env or {})}
    return subprocess.run(["bash", "-c", script], env=full, capture_output=True, text=True, timeout=30)


def _node(tmp_path: Path, requirements: str | None) -> tuple[Path, Path]:
    """A node's home with the synced code (and a requirements.txt), and a fake runtime Python."""
    home = tmp_path / "home"
    code = home / "sky_code"
    code.mkdir(parents=True)
    if requirements is not None:
        (code / "requirements.txt").write_text(requirements)
    return home, fake_python(tmp_path / "venv" / "bin")


def test_the_setup_installs_requirements_into_the_runtime_python(tmp_path: Path) -> None:
    home, py = _node(tmp_path, "# pinned by us\nnumpy>=1.24\n")
    rc = onprem_region(setup="echo region-setup", python=str(py))
    config = task_config("slurm-a", rc, "c", workdir=str(REPO), code_dir=str(tmp_path))
    out = bash(config["setup"], home, config["envs"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("region-setup")
    calls = (py.parent / "calls.txt").read_text().splitlines()
    assert calls == [f"argv: -m pip install -q -r {home}/sky_code/requirements.txt"]


@pytest.mark.parametrize("requirements", [None, "", "# nothing to install\n\n   # really\n"])
def test_the_setup_runs_no_pip_without_requirements(tmp_path: Path, requirements: str | None) -> None:
    home, py = _node(tmp_path, requirements)
    rc = onprem_region(setup="echo region-setup", python=str(py))
    config = task_config("slurm-a", rc, "c", workdir=str(REPO), code_dir=str(tmp_path))
    out = bash(config["setup"], home, config["envs"])
    assert out.returncode == 0, out.stderr
    assert not (py.parent / "calls.txt").exists(), "pip ran for a requirements.txt that names nothing"


def test_the_example_requirements_install_nothing(tmp_path: Path) -> None:
    home, py = _node(tmp_path, (EXAMPLE / "requirements.txt").read_text())
    rc = onprem_region(setup="true", python=str(py))
    config = task_config("slurm-a", rc, "c", workdir=str(REPO), code_dir=str(tmp_path))
    assert bash(config["setup"], home, config["envs"]).returncode == 0
    assert not (py.parent / "calls.txt").exists()


def test_ray_starts_with_the_code_first_on_pythonpath(tmp_path: Path) -> None:
    # Ray's workers take the raylet's environment: the export must come before `ray start`.
    assert RUN_SCRIPT.index(CODE_PATH) < RUN_SCRIPT.index("providers.raystart start")
    out = bash(f'{CODE_PATH}; echo "$PYTHONPATH"', tmp_path, {"ORCH_CODE_DIR": "~/sky_code", "PYTHONPATH": "/x"})
    assert out.stdout.strip() == f"{tmp_path}/sky_code:/x"
    out = bash(f'{CODE_PATH}; echo "$PYTHONPATH"', tmp_path, {"ORCH_CODE_DIR": "~/sky_code"})
    assert out.stdout.strip() == f"{tmp_path}/sky_code"


def test_without_code_dir_pythonpath_is_left_alone(tmp_path: Path) -> None:
    script = f'set -u; {CODE_PATH}; echo "${{PYTHONPATH-unset}}"'
    assert bash(script, tmp_path).stdout.strip() == "unset"
    assert bash(script, tmp_path, {"PYTHONPATH": "/x"}).stdout.strip() == "/x"


def test_the_runtime_driver_starts_with_the_code_first_on_pythonpath(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    regions = compose(["cloud=aws"]).cloud.regions
    py = fake_python(tmp_path / "venv" / "bin")
    regions["us-east-1"].python = str(py)
    provider = SkyPilotProvider(regions, out=io.StringIO(), code_dir=str(project))
    handle = _launched(provider, monkeypatch)
    assert handle.info["code_dir"] == "~/sky_code"

    started: list[list[str]] = []

    stdin = io.BytesIO()

    class Popen:
        def __init__(self, argv: list[str], **kwargs: Any) -> None:
            started.append(argv)
            self.pid = 0
            self.stdin = stdin

    stdin.close = lambda: None  # type: ignore[method-assign]  # read below
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    with monkeypatch.context() as patched:
        patched.setattr("providers.skypilot.provider.subprocess.Popen", Popen)
        patched.setattr(SkyPilotProvider, "_watch", lambda self, cluster: None)
        argv = [sys.executable, "-m", "orchestrator.runtime", str(spec)]
        provider.start_runtime(handle, argv, {}, str(tmp_path / "log"))
    # The cluster's Ray token first (a line the remote shell reads), then the spec.
    token = provider._tokens[handle.name]
    assert stdin.getvalue() == f"{token}\n{{}}".encode()
    # What ssh would run on the head, run here: a home with the project synced, the fake Python.
    (ssh_argv,) = started
    remote = ssh_argv[-1]
    assert remote.startswith("bash --login -c ")
    assert token not in remote and "RAY_AUTH_MODE=token" in remote
    home = tmp_path / "home"
    (home / "sky_workdir").mkdir(parents=True)
    try:
        out = subprocess.run(
            ["bash", "-c", remote.replace("bash --login -c", "bash -c", 1)],
            env={"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": "/x"},
            input=stdin.getvalue().decode(),
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        shutil.rmtree(handle.info["node_dir"], ignore_errors=True)  # the spec's folder, under /tmp
    assert out.returncode == 0, out.stderr
    assert f"PYTHONPATH={home}/sky_code:/x" in out.stdout
    assert (py.parent / "calls.txt").read_text().startswith("argv: -m orchestrator.runtime ")
