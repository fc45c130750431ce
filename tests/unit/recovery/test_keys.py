"""Generation keys (a backward hash chain) and controller-signed fences."""

from __future__ import annotations

import pytest

from recovery.keys import TOP, AttemptKeys, KeysError, controller_keys

pytestmark = pytest.mark.unit
SECRET = bytes(range(32))


def test_an_attempt_derives_every_earlier_generation_and_no_later_one() -> None:
    ctl = controller_keys(SECRET, "run-1")
    third = ctl.for_attempt(3)
    assert [third.generation_key(g) for g in (1, 2, 3)] == [ctl.generation_key(g) for g in (1, 2, 3)]
    assert third.generation_key(4) is None and third.generation_key(0) is None
    with pytest.raises(KeysError, match="beyond"):
        third.for_attempt(4)
    assert len({ctl.generation_key(g) for g in range(1, 20)}) == 19


def test_keys_differ_by_run_and_by_secret() -> None:
    a, b = controller_keys(SECRET, "run-1"), controller_keys(SECRET, "run-2")
    c = controller_keys(bytes(32), "run-1")
    assert len({a.generation_key(1), b.generation_key(1), c.generation_key(1)}) == 3
    assert len({a.fence_public, b.fence_public, c.fence_public}) == 3


def test_only_the_controller_signs_fences_and_anyone_checks_them() -> None:
    ctl = controller_keys(SECRET, "run-1")
    attempt = ctl.for_attempt(2)
    signature = ctl.sign_fence(b"payload")
    assert attempt.fence_verifies(b"payload", signature)
    assert not attempt.fence_verifies(b"payload!", signature)
    assert not attempt.fence_verifies(b"payload", "zz")
    assert not attempt.fence_verifies(b"payload", "00" * 64)
    with pytest.raises(KeysError, match="only the controller"):
        attempt.sign_fence(b"payload")


def test_the_wire_form_round_trips_without_the_fence_seed() -> None:
    attempt = controller_keys(SECRET, "run-1").for_attempt(7)
    wire = attempt.to_wire()
    assert AttemptKeys.from_wire(wire) == attempt and AttemptKeys.from_wire(wire).fence_seed is None
    assert SECRET.hex() not in wire


@pytest.mark.parametrize("text", ["zz", "", "00" * 70, "6b32" + "00" * 68, "6b32ffffffff" + "00" * 64])
def test_a_bad_wire_form_is_refused_without_echoing_it(text: str) -> None:
    with pytest.raises(KeysError) as info:
        AttemptKeys.from_wire(text)
    assert text not in str(info.value) or not text


def test_the_last_generation_is_reachable_and_the_one_after_is_not() -> None:
    ctl = controller_keys(SECRET, "run-1")
    assert ctl.generation_key(TOP) == ctl.chain and ctl.generation_key(TOP + 1) is None
