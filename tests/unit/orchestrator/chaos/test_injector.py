"""The injector's faults: corrupt_newest() flips the newest checkpoint wherever it is held;
kill_node and hang_node strike one worker node (named, or drawn from a seed), or are
refused; the config's word on them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.chaos.injector import FaultInjector, Injected
from orchestrator.chaos.processes import choose_node
from orchestrator.chaos.storage import corrupt_newest
from orchestrator.config.compose import compose
from orchestrator.runstate.events import Event, FaultRefused
from orchestrator.wire.control import ControlChannel
from providers.base import ClusterHandle
from recovery.keys import controller_keys
from recovery.manifest import Manifest
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY
from tests.unit.orchestrator.config.test_compose import config_error

RUN = "run-1"
WriteCheckpoint = Callable[..., Manifest]


def test_corrupt_newest_corrupts_the_newest_step_in_each_store_holding_it_and_spares_laggards(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    a, b, c = (
        CheckpointStore(f"file://{tmp_path}/{n}", region=n, key=TEST_KEY) for n in ("local-a", "local-b", "local-c")
    )
    for store, steps in ((a, (20, 40, 60)), (b, (20, 40, 60)), (c, (20, 40))):
        for step in steps:
            write_checkpoint(store, RUN, step)
    lagging_before = {s: c.fs.cat_file(f"{c.step_path(RUN, s)}/model.pt") for s in (20, 40)}

    assert corrupt_newest([a, b, c], RUN) == {"local-a": 60, "local-b": 60}

    for store in (a, b):
        assert not store.verify(RUN, 60).ok
        assert store.verify(RUN, 40).ok
        m = store.latest_verified(RUN)
        assert m is not None
        assert m.step == 40
    assert {s: c.fs.cat_file(f"{c.step_path(RUN, s)}/model.pt") for s in (20, 40)} == lagging_before
    assert c.verify(RUN, 40).ok


def test_corrupt_newest_is_idempotent_and_passes_over_a_planted_newer_step(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    """Fired twice (a controller that died before marking it fired), the checkpoint stays
    corrupt rather than flipped back; a planted step above it (not signed with the run's
    key) is not the run's newest."""
    a = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    for step in (20, 40):
        write_checkpoint(a, RUN, step)
    stranger = CheckpointStore(f"file://{tmp_path}/a", region="a", key=controller_keys(bytes(32), "stranger"))
    write_checkpoint(stranger, RUN, 900)
    assert corrupt_newest([a], RUN) == {"a": 40}
    assert corrupt_newest([a], RUN) == {"a": 40}
    assert not a.verify(RUN, 40).ok and a.verify(RUN, 20).ok
    assert stranger.verify(RUN, 900).ok


def test_corrupt_newest_without_any_checkpoint_does_nothing(tmp_path: Path) -> None:
    stores = [CheckpointStore(f"file://{tmp_path}/{n}", region=n, key=TEST_KEY) for n in ("a", "b")]
    assert corrupt_newest(stores, RUN) == {}


# --- kill_node and hang_node ---------------------------------------------------------------------


def test_a_named_node_is_struck_and_a_drawn_one_is_the_seeds_draw_among_the_worker_nodes() -> None:
    assert choose_node(2, 0, [1, 2, 3]) == (2, None)
    drawn = {seed: choose_node(None, seed, [3, 1, 2])[0] for seed in range(40)}
    # The same seed, the same node, whatever order the provider lists them in.
    assert drawn == {seed: choose_node(None, seed, [1, 2, 3])[0] for seed in range(40)}
    assert set(drawn.values()) == {1, 2, 3}
    assert choose_node(None, 7, [1]) == (1, None)


@pytest.mark.parametrize(
    ("node", "workers", "why"),
    [
        (None, [], "no worker node"),
        (1, [], "no worker node"),
        (3, [1, 2], "node 3 is not a worker node of the cluster (its worker nodes: 1..2)"),
    ],
)
def test_no_node_to_strike_is_a_reason_not_a_node(node: int | None, workers: list[int], why: str) -> None:
    chosen, problem = choose_node(node, 0, workers)
    assert chosen is None and problem is not None and why in problem


def test_a_provider_that_cannot_tell_nodes_apart_refuses_node_faults(tmp_path: Path) -> None:
    class OneBlob:
        name = "blob"

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
    assert (
        config_error([TWO_NODES, "chaos.faults=[{kind:kill_node,during:provisioning}]"]).key == "chaos.faults[0].during"
    )


# --- a time-based fault's step ---------------------------------------------------------------------


def test_a_timed_fault_strikes_at_the_newest_step_known_done_and_says_what_set_it_off(tmp_path: Path) -> None:
    class NoNodes:
        name = "blob"

        def processes(self, cluster: ClusterHandle) -> list[int]:
            return []

    control = ControlChannel(f"file://{tmp_path}/control")
    blob: Any = NoNodes()
    inj = FaultInjector([{"kind": "hang_node", "after_s": 1.0}], control, blob, lambda: [], "r")
    (fired,) = inj.timed(ClusterHandle("c", "local-a", "blob", ""), None, 1, training_for_s=2.0, step=152)
    assert fired.step == 152 and fired.event().step == 152
    assert fired.text() == "hang_node at step 152 (timed: after_s)"


def test_a_faults_line_names_its_step_or_its_phase() -> None:
    assert Injected(0, "kill_region", 170, 0.0, {}).text() == "kill_region at step 170"
    assert Injected(0, "kill_region", 170, 0.0, {"during": "failover"}).text() == "kill_region (failover)"
