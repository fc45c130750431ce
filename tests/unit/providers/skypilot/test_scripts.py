"""The shell text a cluster runs: what the controller reads back from it."""

from __future__ import annotations

import pytest

from providers.skypilot.scripts import (
    NODES_MISSING,
    NOT_OURS,
    RUN_SCRIPT,
    RUNTIME_GONE,
    follow_script,
    kill_script,
    ready_probe,
    runtime_files,
    runtime_status,
    start_script,
)

pytestmark = pytest.mark.unit


def test_the_run_script_has_its_placeholders_filled() -> None:
    assert "__" not in RUN_SCRIPT and "ORCH_NODE_JOIN_S:-120" in RUN_SCRIPT
    assert "-m providers.skypilot.nodes wait" in RUN_SCRIPT


def test_a_signal_comes_back_negative_as_the_local_provider_says_it() -> None:
    assert [runtime_status(c) for c in (0, 1, 137, 143, 255, RUNTIME_GONE)] == [0, 1, -9, -15, 255, RUNTIME_GONE]


def test_the_runtimes_files_sit_beside_its_spec() -> None:
    assert runtime_files("/n/spec-1.json") == ("/n/spec-1.pid", "/n/spec-1.status", "/n/spec-1.log")
    start, follow = start_script("py -m x /n/spec-1.json", "/n/spec-1.json"), follow_script("/n/spec-1.json")
    assert start.startswith(": >> /n/spec-1.log; setsid -w bash -c") and "tail -n +1" in start
    assert "tail -n 0" in follow and f"exit {RUNTIME_GONE}" in follow


def test_probe_and_kill_exit_with_the_codes_the_provider_reads() -> None:
    assert f"exit {NODES_MISSING}" in ready_probe("/tmp/n") and "/tmp/n/ray-ready" in ready_probe("/tmp/n")
    kill = kill_script(42, "/tmp/n")
    assert kill.startswith("p=42;") and f"exit {NOT_OURS}" in kill and "RAY_TMPDIR=/tmp/n" in kill
