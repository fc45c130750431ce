"""The SDK's one gate, its answers read, and SkyPilot imported on first use only."""

from __future__ import annotations

import ast
import io
import sys
from pathlib import Path

import pytest

from providers.skypilot import sdk
from providers.skypilot.sdk import Prefixed, call, sky_health, status_of
from recovery.detection import Health

pytestmark = pytest.mark.unit
PACKAGE = Path(sdk.__file__).parent


def test_no_module_of_the_package_imports_skypilot_at_module_level() -> None:
    """cloud=local imports the registry, and a SkyPilot provider's modules, without SkyPilot."""
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n == "sky" or n.startswith("sky.") for n in names), f"{path.name} imports {names}"


def test_call_retries_the_calls_own_errors_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk, "SDK_BACKOFF_S", 0.0)
    said: list[str] = []
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError("refused")
        return "ok"

    assert call("sky.status", flaky, said.append) == "ok" and len(tries) == 3
    assert said[0].startswith("sky.status: ConnectionError: refused; retrying in")


def test_call_never_retries_a_cloud_error_and_puts_tracebacklimit_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "tracebacklimit", raising=False)
    tries: list[int] = []

    def leaky() -> None:
        tries.append(1)
        sys.tracebacklimit = 0
        raise ValueError("not retryable")

    with pytest.raises(ValueError):
        call("sky.launch", leaky, lambda line: None)
    assert tries == [1] and not hasattr(sys, "tracebacklimit")


def test_statuses_read_as_health() -> None:
    assert sky_health(["INIT", "UP"]) is Health.UP
    assert sky_health([]) is Health.GONE and sky_health(["STOPPED"]) is Health.GONE
    assert sky_health(["INIT"]) is Health.NOT_UP
    assert status_of({"status": "UP"}) == "UP"


def test_skypilots_log_lines_are_prefixed_without_colour() -> None:
    out = io.StringIO()
    stream = Prefixed(out)
    stream.write("\x1b[32mone\x1b[0m\ntw")
    stream.write("o\n\n")
    assert out.getvalue() == "skypilot: one\nskypilot: two\n"
