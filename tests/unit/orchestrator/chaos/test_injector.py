"""The injector's faults: corrupt_newest() flips the newest checkpoint wherever it is held;
kill_node and hang_node strike one worker node (named, or drawn from a seed), or are
refused; the config's word on them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.chaos.injector import FaultInjector, Injected, fault_text
from orchestrator.config.compose import compose
from orchestrator.runstate.events import Event, FaultRefused
from orchestrator.wire.control import ControlChannel
from providers.base import Capability, ClusterHandle
from recovery.manifest import Manifest
from tests.unit.orchestrator.config.test_compose import config_error

RUN = "run-1"
WriteCheckpoint = Callable[..., Manifest]


# --- kill_node and hang_node ---------------------------------------------------------------------


def test_a_provider_that_cannot_tell_nodes_apart_refuses_node_faults(tmp_path: Path) -> None:
    class OneBlob:
        name = "blob"
        capabilities = frozenset({Capability.LOCAL_PROCESSES})

        def processes(self, cluster: ClusterHandle) -> list[int]:
            return []

    events: list[Event] = []
    control = ControlChannel(f"file://{tmp_path}/control")
    blob: Any = OneBlob()
    inj = FaultInjector([{"kind": "hang_node", "after_s": 1.0}], control, blob, lambda: [], "r", on_event=events.append)
    (fired,) = inj.timed(ClusterHandle("c", "local-a", "blob", ""), None, 1, training_for_s=2.0)
    assert "no worker node" in str(fired.detail["refused"]) and isinstance(events[0], FaultRefused)


# --- the config's word on node faults ----------------------------------------------------------

TWO_NODES = "cloud.regions.local-a.nodes=2"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path))
    return tmp_path


@pytest.mark.usefixtures("home")
def test_node_faults_in_the_config() -> None:
    ok = compose([TWO_NODES, "chaos.faults=[{kind:kill_node,at_step:5,node:1},{kind:hang_node,after_s:3,seed:9}]"])
    assert [(f.kind, f.node, f.seed) for f in ok.chaos.faults] == [("kill_node", 1, 0), ("hang_node", None, 9)]
    head = config_error([TWO_NODES, "chaos.faults=[{kind:kill_node,at_step:5,node:0}]"])
    assert head.key == "chaos.faults[0].node" and "kill_head" in str(head)
    beyond = config_error([TWO_NODES, "chaos.faults=[{kind:kill_node,at_step:5,node:2}]"])
    assert beyond.key == "chaos.faults[0].node" and "1..1" in str(beyond)
    single = config_error(["chaos.faults=[{kind:hang_node,at_step:5}]"])
    assert single.key == "chaos.faults[0].kind" and "nodes to 2 or more" in str(single)
    # Aimed at a region: that region's nodes count, not another's.
    aimed = config_error([TWO_NODES, "chaos.faults=[{kind:kill_node,at_step:5,region:local-b}]"])
    assert aimed.key == "chaos.faults[0].kind" and "'local-b' has none" in str(aimed)
    other = config_error(["chaos.faults=[{kind:kill_region,at_step:5,node:1}]"])
    assert other.key == "chaos.faults[0].node"
    idle = compose([TWO_NODES, "chaos.faults=[{kind:kill_node,at_step:5,node_role:idle}]"])
    assert idle.chaos.faults[0].node_role == "idle" and ok.chaos.faults[0].node_role == "training"
    both = config_error([TWO_NODES, "chaos.faults=[{kind:kill_node,at_step:5,node:1,node_role:idle}]"])
    assert both.key == "chaos.faults[0].node_role" and "not both" in str(both)
    roleless = config_error(["chaos.faults=[{kind:kill_worker,at_step:5,node_role:idle}]"])
    assert roleless.key == "chaos.faults[0].node_role"
    assert "node_role" in str(config_error([TWO_NODES, "chaos.faults=[{kind:kill_node,at_step:5,node_role:busy}]"]))
    assert (
        config_error([TWO_NODES, "chaos.faults=[{kind:kill_node,during:provisioning}]"]).key == "chaos.faults[0].during"
    )


# --- a time-based fault's step ---------------------------------------------------------------------


class NoNodes:
    """A provider that cannot tell a cluster's nodes apart."""

    name = "blob"
    capabilities = frozenset({Capability.LOCAL_PROCESSES})

    def processes(self, cluster: ClusterHandle) -> list[int]:
        return []


def test_a_timed_fault_strikes_at_the_newest_step_known_done_and_says_what_set_it_off(tmp_path: Path) -> None:
    control = ControlChannel(f"file://{tmp_path}/control")
    blob: Any = NoNodes()
    inj = FaultInjector([{"kind": "hang_node", "after_s": 1.0}], control, blob, lambda: [], "r")
    (fired,) = inj.timed(ClusterHandle("c", "local-a", "blob", ""), None, 1, training_for_s=2.0, step=152)
    assert fired.step == 152 and fired.event().step == 152
    assert fired.text() == "hang_node at step 152 (timed: after_s)"


def test_a_faults_line_names_its_step_or_its_phase() -> None:
    assert Injected(0, "kill_region", 170, 0.0, {}).text() == "kill_region at step 170"
    assert Injected(0, "kill_region", 170, 0.0, {"during": "failover"}).text() == "kill_region (failover)"
    # The same line from a journaled fault_injected (action=watch's), whose step may be absent.
    drill = Injected(1, "kill_region", 2591, 0.0, {"trigger": "drill"})
    assert fault_text(drill.kind, drill.event().step, drill.event().extra) == drill.text()
    assert fault_text("torn_checkpoint", None, {}) == "torn_checkpoint"


def test_a_drill_fires_once_as_a_fault_of_its_own_after_the_configs(tmp_path: Path) -> None:
    from orchestrator.wire.sections import FaultSpec

    control = ControlChannel(f"file://{tmp_path}/control")
    blob: Any = NoNodes()
    inj = FaultInjector([{"kind": "hang_node", "after_s": 100.0}], control, blob, lambda: [], "r")
    cluster = ClusterHandle("c", "local-a", "blob", "")
    fired = inj.drill(FaultSpec.from_plain({"kind": "hang_node"}, "fault"), cluster, None, 1, step=77)
    assert (fired.index, fired.step, fired.detail["trigger"]) == (1, 77, "drill")
    assert fired.text() == "hang_node at step 77 (drill)" and control.fired_count(1) == 1
    assert inj.timed(cluster, None, 1, training_for_s=2.0) == []  # the config's own waits its time


# --- kill_worker -------------------------------------------------------------------------------


def test_a_kill_worker_lands_before_its_mark_so_its_victim_never_trains_on(tmp_path: Path) -> None:
    # The victim goes on as soon as it reads the mark: marked first, it could step on.
    control = ControlChannel(f"file://{tmp_path}/control")
    marks_at_kill: list[int] = []

    class Remote:
        name = "remote"
        capabilities = frozenset({Capability.KILL_WORKER})

        def kill_worker(self, cluster: ClusterHandle, pid: int) -> None:
            marks_at_kill.append(control.fired_count(0))

    provider: Any = Remote()
    inj = FaultInjector([{"kind": "kill_worker", "at_step": 5}], control, provider, lambda: [], "r")
    fired = inj.drill(inj.faults.pop(), ClusterHandle("c", "local-a", "remote", ""), None, 1, 5, victim=(1, 4242))
    assert marks_at_kill == [0] and control.fired_count(fired.index) == 1
    assert fired.detail["killed"] == 1 and fired.detail["region"] == "local-a"


def test_a_kill_region_off_this_machine_is_the_providers_and_lands_before_its_mark(tmp_path: Path) -> None:
    from orchestrator.wire.sections import FaultSpec

    # A runtime held at "during: checkpoint_upload" goes on at the mark: an allocation that
    # is cancelled after it could still commit the upload the fault was to cut.
    control = ControlChannel(f"file://{tmp_path}/control")
    marks_at_kill: list[int] = []
    answers: list[str | None] = [None, "scancel of c failed: exit 1: denied", None]
    graceful_asked: list[bool] = []
    events: list[Event] = []

    class Slurm:
        name = "skypilot"
        capabilities = frozenset({Capability.KILL_CLUSTER})

        def kill_cluster(self, cluster: ClusterHandle, graceful: bool = False) -> str | None:
            graceful_asked.append(graceful)
            marks_at_kill.append(control.fired_count(len(marks_at_kill)))
            return answers[len(marks_at_kill) - 1]

    provider: Any = Slurm()
    inj = FaultInjector([], control, provider, lambda: [], "r", on_event=events.append)
    cluster = ClusterHandle("c", "slurm-a", "skypilot", "")
    fired = inj.drill(FaultSpec.from_plain({"kind": "kill_region"}, "fault"), cluster, None, 1, 5)
    assert marks_at_kill == [0] and control.fired_count(fired.index) == 1
    assert fired.detail["cancelled"] is True and inj.state.killed["c"] == fired.at
    refused = inj.drill(FaultSpec.from_plain({"kind": "kill_region"}, "fault"), cluster, None, 1, 6)
    assert refused.detail["refused"] == answers[1] and "cancelled" not in refused.detail
    assert [e.reason for e in events if isinstance(e, FaultRefused)] == [answers[1]]
    # graceful: the plain cancel, sent before the mark too (the upload held there may land in the grace).
    spec = FaultSpec.from_plain({"kind": "kill_region", "graceful": True}, "fault")
    sent = inj.drill(spec, cluster, None, 1, 7)
    assert graceful_asked == [False, False, True] and marks_at_kill[2] == 0
    assert sent.detail["cancelled"] is True and sent.detail["graceful"] is True


def test_a_region_partitioned_off_this_machine_is_frozen_by_its_provider_then_thawed(tmp_path: Path) -> None:
    import threading

    from orchestrator.wire.sections import FaultSpec

    control = ControlChannel(f"file://{tmp_path}/control")
    calls: list[str] = []
    thawed = threading.Event()
    events: list[Event] = []

    class Slurm:
        name = "skypilot"
        capabilities = frozenset({Capability.FREEZE_CLUSTER})

        def freeze_cluster(self, cluster: ClusterHandle) -> str | None:
            calls.append(f"freeze {cluster.name} marks={control.fired_count(len(calls))}")
            return None if len(calls) == 1 else "no running allocation c to send SIGSTOP"

        def thaw_cluster(self, cluster: ClusterHandle) -> str | None:
            calls.append(f"thaw {cluster.name}")
            thawed.set()
            return None

        def processes(self, cluster: ClusterHandle) -> list[int]:
            raise AssertionError("off this machine, no pid is signalled from here")

    provider: Any = Slurm()
    inj = FaultInjector([], control, provider, lambda: [], "r", on_event=events.append)
    cluster = ClusterHandle("c", "slurm-a", "skypilot", "")
    spec = {"kind": "partition_region", "duration_s": 0.2}
    fired = inj.drill(FaultSpec.from_plain(spec, "fault"), cluster, None, 1, 5)
    assert fired.detail["frozen"] is True and fired.detail["duration_s"] == 0.2
    assert thawed.wait(5)
    assert calls == ["freeze c marks=0", "thaw c"]  # frozen before its mark, as a kill_region is
    hung = inj.drill(FaultSpec.from_plain({"kind": "hang_region"}, "fault"), cluster, None, 1, 6)
    assert hung.detail["refused"] == "no running allocation c to send SIGSTOP" and "frozen" not in hung.detail
    assert [e.reason for e in events if isinstance(e, FaultRefused)] == ["no running allocation c to send SIGSTOP"]
