"""Authenticated checkpoints: only a manifest signed with the run's key is restored,
replicated or counted by retention; the run's secret stays in its 0600 file.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import hashlib
import io
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.stores import TEST_KEY

pytestmark = pytest.mark.integration


def test_skypilot_sends_the_key_on_stdin_never_on_a_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    from orchestrator.wire.runkey import ENV, to_env
    from providers.base import ClusterHandle
    from providers.skypilot.provider import SkyPilotProvider

    py = tmp_path / "python"
    # The key's digest, not the key: the runtime's output lands in a log on the node.
    py.write_text(f'#!/bin/sh\necho "key=$(printf %s "${ENV}" | sha256sum | cut -c1-64)"\necho "spec=$(cat "$3")"\n')
    py.chmod(0o755)
    node = tmp_path / "node"
    cluster = ClusterHandle(
        "c", "r", "skypilot", "127.0.0.1:1", {"node_dir": str(node), "python": str(py), "env": {"A": "1"}}
    )
    started: list[list[str]] = []
    stdin = io.BytesIO()
    stdin.close = lambda: None  # type: ignore[method-assign]  # read below

    class Popen:
        def __init__(self, argv: list[str], **kwargs: Any) -> None:
            started.append(argv)
            self.pid = 0
            self.stdin = stdin

    provider = SkyPilotProvider.__new__(SkyPilotProvider)
    provider._tokens, provider._token_key = {}, None
    provider._lock, provider._connections = threading.Lock(), {}
    monkeypatch.setattr(SkyPilotProvider, "_record", lambda self, c: None)
    monkeypatch.setattr(SkyPilotProvider, "_watch", lambda self, c: None)
    monkeypatch.setattr("providers.skypilot.provider.ssh_argv", lambda c, command: ["ssh", command])
    monkeypatch.setattr("providers.skypilot.provider.remote", lambda c, command: command)
    spec = tmp_path / "spec.json"
    spec.write_text('{"run_id": "x"}')
    with monkeypatch.context() as patched:
        patched.setattr("providers.skypilot.provider.subprocess.Popen", Popen)
        argv = ["py", "-m", "orchestrator.runtime", str(spec)]
        provider.start_runtime(cluster, argv, to_env(TEST_KEY.for_attempt(1)), "/dev/null")
    wire = TEST_KEY.for_attempt(1).to_wire()
    ((_, command),) = started
    assert wire not in command
    # What ssh would run on the head, run here with what it would read on stdin.
    out = subprocess.run(["bash", "-c", command], input=stdin.getvalue(), capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    digest = hashlib.sha256(wire.encode()).hexdigest()
    assert out.stdout.decode().splitlines() == [f"key={digest}", 'spec={"run_id": "x"}']
    assert not any(wire.encode() in p.read_bytes() for p in node.rglob("*") if p.is_file())
