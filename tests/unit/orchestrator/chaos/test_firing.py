"""What a firing carries, the state handlers share, and signals to processes that may be gone."""

from __future__ import annotations

import os
import signal

import pytest

from orchestrator.chaos.firing import FaultState, Firing, send_signal
from orchestrator.runstate.events import Event, FaultEnded
from orchestrator.wire.faults import FaultKind
from orchestrator.wire.sections import FaultSpec
from providers.base import ClusterHandle

pytestmark = pytest.mark.unit


def _gone_pid() -> int:
    """A pid no process has (the highest the kernel would hand out, then down)."""
    pid = int(open("/proc/sys/kernel/pid_max").read()) - 1
    while pid > 1:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1
    raise AssertionError("no free pid")


def test_a_signal_reaches_the_processes_that_are_there_and_skips_those_gone() -> None:
    gone = _gone_pid()
    # Signal 0 checks the process is there without touching it: this test's own process.
    assert send_signal([os.getpid(), gone], 0) == [os.getpid()]
    assert send_signal([], signal.SIGKILL) == []


def test_a_firing_strikes_its_cluster_and_one_without_a_cluster_says_so() -> None:
    fault = FaultSpec(kind=FaultKind.kill_region, at_step=3)
    cluster = ClusterHandle("c", "local-a", "local", "127.0.0.1:1", {})
    assert Firing(0, "kill_region", fault, {}, cluster, None, 3, 1.0).on is cluster
    with pytest.raises(AssertionError, match="kill_region needs a cluster"):
        _ = Firing(0, "kill_region", fault, {}, None, None, 3, 1.0).on


def test_the_state_says_each_event_and_runs_what_is_due_later() -> None:
    events: list[Event] = []
    state = FaultState(object(), lambda: [], "run", {}, events.append)  # type: ignore[arg-type]
    state.say(FaultEnded(0, "kill_region", region="local-a"))
    done: list[int] = []
    state.later(0.0, done.append, 7)
    state.timers[0].join(5)
    assert done == [7] and [type(e) for e in events] == [FaultEnded]
