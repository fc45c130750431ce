"""The injector's faults: corrupt_newest() flips the newest checkpoint wherever it is held;
kill_node and hang_node strike one worker node (named, or drawn from a seed), or are
refused; the config's word on them.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.chaos.injector import FaultInjector
from orchestrator.chaos.processes import choose_node
from orchestrator.runstate.events import Event, FaultEnded, FaultRefused
from orchestrator.wire.control import ControlChannel
from providers.base import ClusterHandle, ProvisionError, ProvisionErrorKind, RegionSpec
from recovery.detection import Health
from tests.support.fakecloud import FakeCloud

pytestmark = pytest.mark.integration


@pytest.fixture
def cloud() -> Iterator[FakeCloud]:
    provider = FakeCloud({})
    yield provider
    for cluster in list(provider.clusters.values()):
        provider.teardown(cluster)


def _launch(cloud: FakeCloud, nodes: int) -> ClusterHandle:
    return cloud.launch(RegionSpec("local-a", "file:///unused", 1, 0, nodes), f"c{len(cloud.launched)}", 60)


def _node_injector(tmp_path: Path, cloud: FakeCloud, **fault: Any) -> tuple[FaultInjector, list[Event]]:
    events: list[Event] = []
    control = ControlChannel(f"file://{tmp_path}/control")
    inj = FaultInjector([{"after_s": 1.0, **fault}], control, cloud, lambda: [], "r", on_event=events.append)  # type: ignore[arg-type]
    return inj, events


def _health(cloud: FakeCloud, cluster: ClusterHandle) -> dict[int, Health]:
    return {check.index: check.health for check in cloud.nodes(cluster)}


def _until(done: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)
    return done()


def test_kill_node_sigkills_every_process_of_the_named_node_alone_and_names_it_and_its_pids(
    tmp_path: Path, cloud: FakeCloud
) -> None:
    cluster = _launch(cloud, 3)
    inj, events = _node_injector(tmp_path, cloud, kind="kill_node", node=2)
    victim = cloud.node_processes(cluster, 2)
    (fired,) = inj.timed(cluster, None, 1, training_for_s=1.5)
    assert (fired.detail["node"], fired.detail["pids"], fired.detail["killed"]) == (2, victim, 1)
    assert _until(lambda: _health(cloud, cluster) == {1: Health.UP, 2: Health.GONE})
    event = fired.event()
    assert event.kind == "kill_node" and event.extra["node"] == 2 and event.extra["pids"] == victim
    assert events == [] and inj.control.fired_count(0) == 1
    # The controller's replacement: a new node under the same index, up.
    cloud.replace_node(cluster, 2, 30)
    assert _health(cloud, cluster) == {1: Health.UP, 2: Health.UP}
    assert cloud.node_processes(cluster, 2) != victim and cloud.replaced == [(cluster.name, 2)]


def test_kill_node_at_a_step_fires_through_the_runtimes_rendezvous_on_a_node_drawn_from_its_seed(
    tmp_path: Path, cloud: FakeCloud
) -> None:
    cluster = _launch(cloud, 3)
    events: list[Event] = []
    control = ControlChannel(f"file://{tmp_path}/control")
    fault = {"kind": "kill_node", "at_step": 20, "seed": 5}
    inj = FaultInjector([fault], control, cloud, lambda: [], "r", on_event=events.append)  # type: ignore[arg-type]
    control.chaos_request(0, seq=1, kind="kill_node", step=20, rank=0, pid=os.getpid(), generation=1)
    (fired,) = inj.poll(cluster, None, generation=1)
    node = choose_node(None, 5, [1, 2])[0]
    assert fired.step == 20 and fired.detail["node"] == node
    assert _until(lambda: _health(cloud, cluster)[node] is Health.GONE)
    assert [h for i, h in _health(cloud, cluster).items() if i != node] == [Health.UP]
    assert control.fired_count(0) == 1 and inj.poll(cluster, None, generation=1) == []


def test_hang_node_stops_the_node_and_resumes_it_after_duration_s(tmp_path: Path, cloud: FakeCloud) -> None:
    cluster = _launch(cloud, 2)
    inj, events = _node_injector(tmp_path, cloud, kind="hang_node", duration_s=0.3)
    (fired,) = inj.timed(cluster, None, 1, training_for_s=1.5)
    assert (fired.detail["node"], fired.detail["stopped"], fired.detail["duration_s"]) == (1, 1, 0.3)
    assert _until(lambda: _health(cloud, cluster) == {1: Health.NOT_UP})
    assert _until(lambda: bool(events))
    assert events == [FaultEnded(0, "hang_node", region="local-a", resumed=1)]
    assert _until(lambda: _health(cloud, cluster) == {1: Health.UP})
    inj.close()


def test_a_hung_node_replaced_before_duration_s_is_not_resumed(tmp_path: Path, cloud: FakeCloud) -> None:
    cluster = _launch(cloud, 2)
    inj, events = _node_injector(tmp_path, cloud, kind="hang_node", node=1, duration_s=0.3)
    (fired,) = inj.timed(cluster, None, 1, training_for_s=1.5)
    cloud.replace_node(cluster, 1, 30)  # the controller fences it: killed, then a new one
    assert fired.detail["pids"] != cloud.node_processes(cluster, 1)
    assert _until(lambda: bool(events))
    assert events == [FaultEnded(0, "hang_node", region="local-a", resumed=0)]
    assert _health(cloud, cluster) == {1: Health.UP}
    inj.close()


def test_a_replacement_that_fails_raises_and_leaves_the_node_gone(cloud: FakeCloud) -> None:
    cluster = _launch(cloud, 2)
    cloud.node_replacements = [ProvisionErrorKind.TIMEOUT]
    with pytest.raises(ProvisionError) as err:
        cloud.replace_node(cluster, 1, 0.1)
    assert err.value.kind is ProvisionErrorKind.TIMEOUT
    assert _health(cloud, cluster) == {1: Health.GONE} and cloud.replaced == []
    cloud.replace_node(cluster, 1, 30)
    assert _health(cloud, cluster) == {1: Health.UP}


@pytest.mark.parametrize(
    ("nodes", "node", "why"),
    [
        (1, None, "no worker node"),
        (1, 1, "no worker node"),
        (2, 2, "node 2 is not a worker node of the cluster (its worker nodes: 1..1)"),
    ],
)
def test_a_node_fault_with_no_such_node_is_refused_journaled_and_kills_nothing(
    tmp_path: Path, cloud: FakeCloud, nodes: int, node: int | None, why: str
) -> None:
    cluster = _launch(cloud, nodes)
    inj, events = _node_injector(tmp_path, cloud, kind="kill_node", node=node)
    before = cloud.processes(cluster)
    (fired,) = inj.timed(cluster, None, 1, training_for_s=1.5)
    assert why in str(fired.detail["refused"]) and "pids" not in fired.detail
    (refused,) = events
    assert isinstance(refused, FaultRefused) and refused.kind == "kill_node" and why in refused.reason
    # Marked fired all the same: a runtime waiting at the rendezvous goes on.
    assert inj.control.fired_count(0) == 1
    assert cloud.processes(cluster) == before and set(_health(cloud, cluster).values()) <= {Health.UP}
