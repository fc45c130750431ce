"""The project and its cloud extras resolve, with the constraints, on PyPI alone."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support import resolution
from tests.support.paths import REPO
from tests.support.runs import skip_unless_strict

pytestmark = pytest.mark.install


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and not name.startswith("#"):
            pins[_norm(name)] = version
    return pins


def test_aws_and_gcp_extras_resolve_with_the_constraints_on_the_package_index() -> None:
    ci = os.environ.get(resolution.CI_DIR_ENV)
    if ci:
        code, report, tail = resolution.wait(Path(ci), None)
    else:
        assert resolution.started is not None, "the suite did not start the resolution (tests/conftest.py)"
        code, report, tail = resolution.wait(*resolution.started)
    if code.startswith("none:"):
        skip_unless_strict(code[len("none: ") :] + ", to stand in for the index's CUDA build")
    if code != "0" and ("Network is unreachable" in tail or "Failed to establish a new connection" in tail):
        skip_unless_strict(f"{resolution.INDEX_URL} cannot be reached: {tail[-300:]}")
    assert code == "0" and report is not None, f"pip could not resolve '.[aws,gcp]' ({code}):\n{tail}"

    installs = {_norm(i["metadata"]["name"]): i for i in report["install"]}
    pins = _pins()
    # Every package pip would install is pinned, at its pin: what a user gets is what we test.
    # pip itself (SkyPilot asks for it) is the venv's own.
    unpinned = sorted(n for n in installs if n not in pins and n not in ("orchestrator", "pip"))
    assert not unpinned, f"constraints.txt pins none of {unpinned}"
    for name, item in installs.items():
        if name in pins:
            assert item["metadata"]["version"].split("+")[0] == pins[name], name
    # Everything but torch came from the index itself.
    for name, item in installs.items():
        url = item["download_info"]["url"]
        if name == "torch":
            assert url.startswith("file://") and f"torch-{resolution.TORCH}+cpu" in unquote(url)
        elif name != "orchestrator":
            assert url.startswith("https://"), f"{name} came from {url}, not the index"
    # The extras brought their clouds' SDKs and their stores' filesystems.
    for needed in ("skypilot", "boto3", "s3fs", "google-api-python-client", "google-cloud-storage", "gcsfs"):
        assert needed in installs, f"'.[aws,gcp]' does not install {needed}"
