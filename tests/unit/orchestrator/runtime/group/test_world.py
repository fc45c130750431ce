"""The worker group's world size: the controller's word on the nodes, Ray's view, the wait."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.runtime.group.world import GIVE_UP_AFTER_S, WORD_SETTLE_S, WorldPolicy
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.spec import RuntimeSpec
from recovery.elastic import decide_world

pytestmark = pytest.mark.unit


def test_decide_world_waits_for_a_replacement_then_takes_what_fits() -> None:
    # A replacement is coming: wait, whatever fits now.
    assert decide_world(1, 1, wait_until=10.0, now=5.0, workers=2, min_workers=1) is None
    # Past the deadline: what fits, down to min_workers.
    assert decide_world(2, 1, wait_until=10.0, now=10.0, workers=2, min_workers=1) == 1
    assert decide_world(2, 1, wait_until=10.0, now=10.0, workers=2, min_workers=0) is None
    # Replaced: the word says 2 fit again, and Ray agrees.
    assert decide_world(2, 2, wait_until=0.0, now=11.0, workers=2, min_workers=1) == 2
    # The word is believed over Ray's stale count; Ray over a word that promises more.
    assert decide_world(2, 1, 0.0, 1.0, 2, 1) == 1
    assert decide_world(1, 2, 0.0, 1.0, 2, 1) == 1
    assert decide_world(4, None, 0.0, 1.0, 2, 0) == 2


class Clock:
    """Now, as the controller's words are dated (time.time), moved by hand."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def policy(tmp_path: Path, nodes: int, min_workers: int, fits: list[int]) -> tuple[WorldPolicy, ControlChannel, Clock]:
    control = ControlChannel(f"file://{tmp_path}/control", {})
    spec = RuntimeSpec(
        run_id="run-1",
        generation=1,
        region="local-a",
        store_url=f"file://{tmp_path}/store",
        control_url=control.url,
        ray_address="127.0.0.1:1",
        ray_storage_path=str(tmp_path / "ray"),
        job={"name": "digits", "workload": "digits"},
        trainer={"workers": 2, "min_workers": min_workers},
        checkpoint={},
        nodes=nodes,
        node_wait_s=30.0,
    )
    clock = Clock()
    # Ray's view: what fits, and as many live nodes as the fit says (one worker a node).
    return WorldPolicy(spec, control, nodes=lambda: (fits[0], fits[0]), clock=clock), control, clock


def waits(tmp_path: Path, control: ControlChannel) -> list[dict[str, object]]:
    return [e.fields for e in control.read_events(1, set()) if e.kind == "world_waiting"]


def test_first_group_takes_what_fits_and_a_restart_waits_for_the_controllers_word(tmp_path: Path) -> None:
    fits = [2]
    world, control, clock = policy(tmp_path, nodes=2, min_workers=1, fits=fits)
    assert world.decide() == 2
    # A failure: Ray still counts the dead node; without the controller's word the
    # group waits a moment rather than be placed on it.
    clock.now += 5
    assert world.decide() is None
    control.nodes_word(1, fits=1, wait_until=clock.now + 30, lost=[1])
    fits[0] = 1  # Ray let the dead node go
    assert world.decide() is None  # a replacement is on its way
    assert [w["reason"] for w in waits(tmp_path, control)] == ["a replacement for node(s) [1] is on its way"]
    control.nodes_word(1, fits=2, wait_until=0.0, lost=[])
    fits[0] = 2
    assert world.decide() == 2  # replaced: the full world, the exact run


def test_no_replacement_in_time_goes_on_with_fewer_then_gives_up_below_min(tmp_path: Path) -> None:
    fits = [2]
    world, control, clock = policy(tmp_path, nodes=2, min_workers=1, fits=fits)
    assert world.decide() == 2
    clock.now += 1
    control.nodes_word(1, fits=1, wait_until=0.0, lost=[1])
    fits[0] = 1
    assert world.decide() == 1
    # Below min_workers: wait (the controller fails the region over), and in the end give up.
    fits[0] = 0
    clock.now += 1
    control.nodes_word(1, fits=0, wait_until=0.0, lost=[1, 2])
    assert world.decide() is None
    clock.now += GIVE_UP_AFTER_S + 1
    with pytest.raises(RuntimeError, match="no worker group can start"):
        world.decide()


def test_a_one_node_region_never_waits_for_a_word(tmp_path: Path) -> None:
    world, _, clock = policy(tmp_path, nodes=1, min_workers=1, fits=[1])
    assert world.decide() == 1  # a failover region that fits one worker: elastic from the start
    clock.now += WORD_SETTLE_S / 10
    assert world.decide() == 1


def test_a_word_written_during_the_last_group_is_taken_at_once(tmp_path: Path) -> None:
    fits = [2]
    world, control, clock = policy(tmp_path, nodes=2, min_workers=1, fits=fits)
    assert world.decide() == 2
    clock.now += 5
    # The controller saw the node die before Ray Train's restart asked: no settling wait.
    control.nodes_word(1, fits=1, wait_until=0.0, lost=[1])
    clock.now += 1
    fits[0] = 1
    assert world.decide() == 1


def test_a_word_from_before_the_last_group_is_not_taken_for_news(tmp_path: Path) -> None:
    fits = [2]
    world, control, clock = policy(tmp_path, nodes=2, min_workers=1, fits=fits)
    control.nodes_word(1, fits=2, wait_until=0.0, lost=[])  # an earlier loss, replaced
    clock.now += 10
    assert world.decide() == 2
    clock.now += 5
    assert world.decide() is None  # a new failure: the old word says nothing of it
    clock.now += WORD_SETTLE_S
    assert world.decide() == 2  # no word came: Ray's view


def test_ray_still_counting_a_node_the_controller_saw_die_holds_the_group_back(tmp_path: Path) -> None:
    seen = [(2, 3)]  # the replacement joined, the dead node not yet let go of
    control = ControlChannel(f"file://{tmp_path}/control", {})
    world, _, clock = policy(tmp_path, nodes=2, min_workers=1, fits=[2])
    world.nodes = lambda: seen[0]
    assert world.decide() == 2
    clock.now += 1
    control.nodes_word(1, fits=2, wait_until=0.0, lost=[])
    clock.now += 1
    assert world.decide() is None
    seen[0] = (2, 2)
    assert world.decide() == 2


def test_a_restart_whose_lost_workers_nodes_answer_does_not_wait_for_a_word(tmp_path: Path) -> None:
    world, _control, clock = policy(tmp_path, nodes=2, min_workers=1, fits=[2])
    assert world.decide() == 2
    clock.now += 5
    # A worker died on a node that is still there (its spare answered): nothing to settle.
    world.vouched = lambda: True
    assert world.decide() == 2
    clock.now += 5
    world.vouched = lambda: False  # no answer: the node may be gone with Ray still counting it
    assert world.decide() is None

    def cannot_tell() -> bool:
        raise RuntimeError("the spare's actor handle is gone")

    world.vouched = cannot_tell
    assert world.decide() is None
    clock.now += WORD_SETTLE_S
    assert world.decide() == 2, "past the settle, Ray's view as before"
