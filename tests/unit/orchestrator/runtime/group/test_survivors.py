"""A survivor's way back into the group (``GroupRecovery``), over a scripted member and
stores: leaving, waiting for the next epoch, joining it or being refused, and rank 0's
choice of the newest committed checkpoint. The restore from peers runs over real gloo
groups: tests/chaos/test_survivors.py."""

from __future__ import annotations

import types
from typing import Any

import pytest

from orchestrator.runtime.group.rendezvous import Refused
from orchestrator.runtime.group.survivors import GroupRecovery
from recovery.fencing import FencedError

pytestmark = pytest.mark.unit


class Control:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def event(self, generation: int, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]


class Member:
    """Epochs as the driver publishes them; ``joins[epoch]``: what joining it does."""

    def __init__(self, epochs: list[int], joins: dict[int, Any]) -> None:
        self.epoch = 0
        self.members: Any = None
        self.epochs, self.joins = list(epochs), joins
        self.left = 0

    def leave(self) -> None:
        self.left += 1

    def wait_for_epoch(self, after: int) -> int:
        newer = [e for e in self.epochs if e > after]
        if not newer:
            raise TimeoutError(f"nothing after {after}")
        return newer[0]

    def join(self, epoch: int) -> Any:
        outcome = self.joins[epoch]
        if isinstance(outcome, BaseException):
            raise outcome
        self.epoch, self.members = epoch, outcome
        return outcome


def recovery(member: Member, control: Control, stores: list[Any] | None = None, rule: Any = None) -> GroupRecovery:
    spec = types.SimpleNamespace(run_id="run", generation=2, peer_restore="on")
    return GroupRecovery(spec, control, 1, member, stores or [], rule or (lambda: (None, [])))  # type: ignore[arg-type]


def members(n: int, mode: str = "join") -> Any:
    return types.SimpleNamespace(pids=tuple(range(n)), mode=mode, joining=(n - 1,))


def lost_peer() -> RuntimeError:
    return RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer\nmore")


def test_a_survivor_settles_leaves_and_joins_the_next_epoch_with_its_world_size() -> None:
    control, settled = Control(), []
    member = Member([1], {1: members(3)})
    g = recovery(member, control)
    assert g.rejoin(lost_peer(), 40, lambda: settled.append(True)) == 3
    assert settled == [True] and member.left == 1 and g.epoch == 1 and g.joining
    kind, fields = control.events[0]
    assert kind == "group_left" and fields["step"] == 40 and fields["epoch"] == 0
    assert fields["error"] == "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer"


def test_an_upload_that_fails_to_settle_does_not_keep_a_survivor_out() -> None:
    def settle() -> None:
        raise OSError("store down")

    assert recovery(Member([1], {1: members(2)}), Control()).rejoin(lost_peer(), 1, settle) == 2


def test_a_member_that_never_came_is_left_for_its_replacements_epoch() -> None:
    member = Member([1, 2], {1: TimeoutError("rank 2 never came"), 2: members(2)})
    assert recovery(member, Control()).rejoin(lost_peer(), 1, lambda: None) == 2
    assert member.left == 2 and member.epoch == 2


def test_no_replacement_in_time_raises_the_loss_for_ray_train_to_restart_the_group() -> None:
    exc = lost_peer()
    with pytest.raises(RuntimeError) as raised:
        recovery(Member([], {}), Control()).rejoin(exc, 1, lambda: None)
    assert raised.value is exc


def test_a_survivor_the_epoch_refuses_is_fenced_and_says_why() -> None:
    control = Control()
    member = Member([1], {1: Refused("rank 1 is pid 7 in epoch 1, not this process")})
    with pytest.raises(FencedError, match="refused by the group of epoch 1"):
        recovery(member, control).rejoin(lost_peer(), 1, lambda: None)
    assert control.kinds() == ["group_left", "regroup_refused"]


class Lineage:
    def allows(self, attempt: int, step: int) -> bool:
        return attempt <= 2

    def why_not(self, attempt: int, step: int) -> str:
        return f"attempt {attempt} is not on the lineage"


class Store:
    def __init__(self, region: str, manifests: dict[int, Any] | None) -> None:
        self.region, self.manifests = region, manifests

    def candidates(self, run_id: str) -> list[int]:
        if self.manifests is None:
            raise OSError("unreachable")
        return sorted(self.manifests, reverse=True)

    def trusted_manifest(self, run_id: str, step: int) -> tuple[Any, Any]:
        m = self.manifests[step]  # type: ignore[index]
        if m is None:
            return None, types.SimpleNamespace(ok=False, reason="manifest signature does not verify")
        return m, types.SimpleNamespace(ok=True, reason="")


def manifest(step: int, attempt: int = 1) -> Any:
    return types.SimpleNamespace(step=step, attempt=attempt, to_json=lambda: f"m{step}")


def test_rank_0_takes_the_newest_commit_on_the_lineage_from_the_stores_it_can_use() -> None:
    control = Control()
    a = Store("a", {50: None, 40: manifest(40, attempt=3), 30: manifest(30)})
    down = Store("b", None)
    c = Store("c", {35: manifest(35)})
    fenced = Store("d", {90: manifest(90)})  # its fence could not be read: not usable
    g = recovery(Member([], {}), control, [a, down, c, fenced], lambda: (Lineage(), [a, down, c]))
    assert g.newest_committed() == (2, "m35")
    skipped = [(f["region"], f["step"], f["reason"]) for k, f in control.events if k == "checkpoint_skipped"]
    assert skipped == [
        ("a", 50, "manifest signature does not verify"),
        ("a", 40, "attempt 3 is not on the lineage"),
    ]


def test_no_commit_anywhere_is_none() -> None:
    store = Store("a", {})
    assert recovery(Member([], {}), Control(), [store], lambda: (Lineage(), [store])).newest_committed() is None


def test_a_checkpoint_a_rank_found_bad_is_passed_over_for_the_next_without_a_second_journal_line() -> None:
    control = Control()
    a = Store("a", {40: manifest(40), 30: manifest(30)})
    c = Store("c", {35: manifest(35)})
    g = recovery(Member([], {}), control, [a, c], lambda: (Lineage(), [a, c]))
    assert g.newest_committed() == (0, "m40")
    assert g.newest_committed({(0, 40)}) == (1, "m35")
    assert g.newest_committed({(0, 40), (1, 35)}) == (0, "m30")
    assert g.newest_committed({(0, 40), (1, 35), (0, 30)}) is None
    assert [k for k, _ in control.events] == [], "the rank that found it bad journals it, not the choice"
