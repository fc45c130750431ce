"""A cluster's processes by their marker (providers/procs.py), without starting any: the real
kills are tests/integration's."""

from __future__ import annotations

import pytest

from providers import procs

pytestmark = pytest.mark.unit


def test_a_cluster_nobody_started_has_no_processes() -> None:
    assert procs.marked("no-such-cluster-for-tests") == []
    assert procs.node_marked("no-such-cluster-for-tests", 1) == []


def test_nothing_listed_is_nothing_killed() -> None:
    assert procs.kill_until_gone(lambda: [], "nothing") == []


def test_processes_that_keep_coming_back_are_an_error_naming_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procs.os, "kill", lambda pid, sig: None)
    monkeypatch.setattr(procs, "_reap", lambda pids: None)
    monkeypatch.setattr(procs.time, "sleep", lambda s: None)
    with pytest.raises(RuntimeError, match=r"processes of cluster c survive SIGKILL: \[4242\]"):
        procs.kill_until_gone(lambda: [4242], "cluster c", timeout_s=0)
