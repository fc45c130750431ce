"""The controller lease: taken, held, lost, refused, step by step on a local folder, with
the clocks driven by the test."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.control.lease import (
    ControllerLease,
    LeaseHeld,
    LeaseRecord,
    decode,
    encode,
    next_controller,
    refusal,
)
from recovery.sealed import seal

pytestmark = pytest.mark.unit
KEY = b"k" * 32


class Clocks:
    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0

    def sleep(self, s: float) -> None:
        self.wall += s
        self.mono += s

    def jump(self, s: float) -> None:
        self.sleep(s)


def _lease(tmp_path: Path, clocks: Clocks, ttl: float = 10.0, key: bytes = KEY) -> ControllerLease:
    from recovery.storage import open_fs

    fs, root = open_fs(f"file://{tmp_path}/ctl/run-1")
    return ControllerLease(
        fs, root, key, "run-1", ttl, clock=lambda: clocks.wall, mono=lambda: clocks.mono, sleep=clocks.sleep
    )


def _rec(**kw: object) -> LeaseRecord:
    base = {
        "run_id": "run-1",
        "controller": 1,
        "token": "t",
        "host": "h",
        "pid": 1,
        "renewed_at": 0.0,
        "expires_at": 100.0,
    }
    return LeaseRecord(**{**base, **kw})  # type: ignore[arg-type]


def test_a_lease_round_trips_and_nothing_altered_or_of_another_run_is_one() -> None:
    rec = _rec()
    assert decode(encode(rec, KEY), KEY, "run-1") == rec
    assert "does not verify" in str(decode(encode(rec, b"x" * 32), KEY, "run-1"))
    assert "run 'run-1'" in str(decode(encode(rec, KEY), KEY, "run-2"))
    forged = json.loads(encode(rec, KEY))
    forged["controller"] = 9
    assert "does not verify" in str(decode(json.dumps(forged).encode(), KEY, "run-1"))
    # Sealed with the key, and still no lease: a field of the wrong type.
    odd = {**json.loads(encode(rec, KEY)), "controller": True}
    odd.pop("mac")
    assert decode(seal(odd, KEY), KEY, "run-1") == "has a controller that is not a int"
    assert decode(b"[", KEY, "run-1") == "is not JSON"
    assert decode(b"{}", KEY, "run-1") == "is not a lease"
    assert "larger" in str(decode(b" " * 5000, KEY, "run-1"))


def test_who_may_take_the_run() -> None:
    held = _rec(expires_at=100.0, token="other")
    assert refusal(None, 50.0) is None
    assert "controller 1 on h (pid 1)" in str(refusal(held, 50.0))
    assert refusal(held, 100.0) is None  # lapsed
    assert refusal(held, 50.0, token="other") is None  # its own
    assert refusal(_rec(released=True), 50.0) is None
    assert refusal("is not JSON", 50.0) is None  # a lease that does not verify is nobody's
    assert next_controller(None, 0) == 1
    assert next_controller(held, 0) == 2
    assert next_controller(held, 4) == 5  # a mirror of a later controller, its lease deleted


def test_taken_renewed_released_then_taken_by_the_next_controller(tmp_path: Path) -> None:
    clocks = Clocks()
    first = _lease(tmp_path, clocks)
    rec = first.take()
    assert rec.controller == 1 and first.confirmed()
    second = _lease(tmp_path, clocks)
    with pytest.raises(LeaseHeld, match=r"driven by controller 1 on .* whose lease holds until"):
        second.take()
    clocks.jump(3)
    assert first.renew() is None
    assert first.read().expires_at == pytest.approx(clocks.wall + 10)  # type: ignore[union-attr]
    first.release()
    rec2 = second.take()
    assert rec2.controller == 2
    assert isinstance(second.previous, LeaseRecord) and second.previous.released


def test_a_frozen_holder_finds_its_lease_taken_and_an_unfrozen_one_goes_on(tmp_path: Path) -> None:
    clocks = Clocks()
    frozen = _lease(tmp_path, clocks)
    frozen.take()
    clocks.jump(5.0)
    assert frozen.confirmed()  # within ttl - margin (10 - 3.33)
    clocks.jump(2.0)
    assert not frozen.confirmed()
    assert frozen.check() is None  # nobody took it: renewed, and trusted again
    assert frozen.confirmed()
    clocks.jump(30)  # stopped past its lease
    taker = _lease(tmp_path, clocks)
    assert taker.take().controller == 2
    assert frozen.check() == ("taken by controller 2 on " + taker.record.host + f" (pid {taker.record.pid})", False)  # type: ignore[union-attr]
    # It renews nothing: the taker's lease stands.
    assert taker.read().token == taker.token  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "plant",
    ["empty-object", "deleted", "unsigned-next", "another-key-next", "fifo", "folder", "symlink", "earlier-copy"],
)
def test_what_does_not_verify_in_place_of_the_lease_is_nobodys(tmp_path: Path, plant: str) -> None:
    # A store writer without the key: the holder keeps the run (its own lease written
    # again, said once), and a taker is not kept out by it.
    clocks = Clocks()
    holder = _lease(tmp_path, clocks)
    holder.take()
    ignored: list[str] = []
    holder.on_ignored = ignored.append
    path = Path(holder.path)
    now = clocks.wall
    forged = {"run_id": "run-1", "controller": 2, "token": "x", "host": "h", "pid": 9, "renewed_at": now}
    forged.update(expires_at=now + 1e9, released=False)
    if plant == "earlier-copy":
        earlier = holder.read()
        holder.release()
        holder = _lease(tmp_path, clocks)
        holder.take()  # controller 2 holds it; controller 1's lease is put back
        holder.on_ignored = ignored.append
        assert isinstance(earlier, LeaseRecord)
        path.write_bytes(encode(earlier, KEY))
    else:
        path.unlink()
    if plant == "empty-object":
        path.write_text("{}")
    elif plant == "unsigned-next":
        path.write_text(json.dumps(forged))
    elif plant == "another-key-next":
        path.write_bytes(seal(forged, b"o" * 32))
    elif plant == "fifo":
        os.mkfifo(path)
    elif plant == "folder":
        (path / "x").mkdir(parents=True)
    elif plant == "symlink":
        path.symlink_to(tmp_path / "elsewhere")
    clocks.jump(8)
    assert holder.check() is None
    assert len(ignored) == 1, ignored
    back = holder.read()
    assert isinstance(back, LeaseRecord) and back.token == holder.token
    assert not (tmp_path / "elsewhere").exists()
    # The same plant again, once the holder's lease lapsed: a taker is not kept out by it.
    taker = _lease(tmp_path, clocks)
    if plant == "unsigned-next":
        path.write_text(json.dumps(forged))
    clocks.jump(60)
    assert taker.take().controller == holder.record.controller + 1  # type: ignore[union-attr]


def test_only_a_verified_lease_of_a_later_controller_makes_the_holder_stand_down(tmp_path: Path) -> None:
    clocks = Clocks()
    holder = _lease(tmp_path, clocks)
    rec = holder.take()
    Path(holder.path).write_bytes(encode(replace(rec, controller=rec.controller + 1, token="other"), KEY))
    clocks.jump(8)
    assert holder.check() == (f"taken by controller {rec.controller + 1} on {rec.host} (pid {rec.pid})", False)


def test_two_takers_of_one_lapsed_lease_one_wins(tmp_path: Path) -> None:
    clocks = Clocks()
    a, b = _lease(tmp_path, clocks), _lease(tmp_path, clocks)
    # b writes during a's settle: the read back tells a it lost.
    a.sleep = lambda s: (clocks.sleep(s), b._write(_rec(token=b.token, controller=1, expires_at=clocks.wall + 10)))
    with pytest.raises(LeaseHeld, match="driven by controller 1"):
        a.take()


def test_a_store_out_of_reach_for_a_whole_lease_is_a_stand_down_to_restart(tmp_path: Path) -> None:
    clocks = Clocks()
    holder = _lease(tmp_path, clocks)
    holder.take()
    clocks.jump(8)

    def unreachable(*a: object, **k: object) -> bytes:
        raise ConnectionError("refused")

    holder.fs.cat_file = unreachable  # type: ignore[method-assign]
    why, restart = holder.check()  # type: ignore[misc]
    assert restart and "did not answer for 10 s (ConnectionError)" in why


def test_a_generation_is_claimed_by_one_controller_only(tmp_path: Path) -> None:
    clocks = Clocks()
    a, b = _lease(tmp_path, clocks), _lease(tmp_path, clocks)
    assert a.claim(1) and not b.claim(1)
    assert b.claimed() == 1
    # a died between its claim and its lease: the next taker goes above the claim.
    assert b.take().controller == 2
    assert sorted(p.name for p in (tmp_path / "ctl/run-1/claims").iterdir()) == ["c1", "c2"]


def test_two_takers_that_both_saw_the_lease_lapse_do_not_both_take_it(tmp_path: Path) -> None:
    clocks = Clocks()
    a, b = _lease(tmp_path, clocks), _lease(tmp_path, clocks)
    # b read the (absent) lease and counted the claims before a claimed: it computes 1 too.
    b.claimed = lambda: 0  # type: ignore[method-assign]
    a.take()
    b.read = lambda: None  # type: ignore[method-assign]
    with pytest.raises(LeaseHeld, match="claimed the run as controller 1 at the same instant"):
        b.take()


@pytest.mark.parametrize("plant", ["unsigned", "fifo", "folder", "huge"])
def test_a_claim_that_is_not_this_runs_neither_raises_the_number_nor_blocks_it(tmp_path: Path, plant: str) -> None:
    clocks = Clocks()
    claims = tmp_path / "ctl" / "run-1" / "claims"
    claims.mkdir(parents=True)
    victim = claims / "c1"
    if plant == "unsigned":
        victim.write_text(json.dumps({"token": "x", "host": "h", "pid": 1}))
    elif plant == "fifo":
        os.mkfifo(victim)
    elif plant == "folder":
        victim.mkdir()
    else:
        victim.write_bytes(b" " * 10_000)
    (claims / "c999999999").write_text("{}")  # past the bound: ignored, not a floor
    (claims / "c999998").write_text("{}")  # within it, but not a claim of the run's
    taker = _lease(tmp_path, clocks)
    assert taker.take().controller == 2
    names = {name for name, _ in taker.ignored_claims}
    assert {"c1", "c999998"} <= names and "c999999999" not in names


def test_a_file_where_the_claims_folder_goes_is_removed_not_taken_for_a_race(tmp_path: Path) -> None:
    clocks = Clocks()
    (tmp_path / "ctl" / "run-1").mkdir(parents=True)
    (tmp_path / "ctl" / "run-1" / "claims").write_text("not a folder")
    taker = _lease(tmp_path, clocks)
    assert taker.take().controller == 1
    assert ("claims", "a file where the claims' folder goes: removed") in taker.ignored_claims


def test_claims_that_are_not_the_runs_past_the_bound_of_tries_are_one_clear_refusal(tmp_path: Path) -> None:
    clocks = Clocks()
    claims = tmp_path / "ctl" / "run-1" / "claims"
    claims.mkdir(parents=True)
    for n in range(1, 80):
        (claims / f"c{n}").write_text("{}")
    with pytest.raises(LeaseHeld, match="holds claims that are not this run's; remove them"):
        _lease(tmp_path, clocks).take()


def test_a_lease_naming_a_controller_past_the_bound_is_not_a_lease() -> None:
    rec = _rec(controller=10**9, renewed_at=1.0, expires_at=2.0)
    assert "outside 1..999999" in str(decode(encode(rec, KEY), KEY, "run-1"))


def test_a_refusal_names_a_holder_that_no_longer_runs_on_this_machine() -> None:
    import socket

    from orchestrator.control.lease import holder_running

    held = _rec(expires_at=100.0, token="other", host=socket.gethostname(), pid=2**22 + 12345)
    assert holder_running(held) is False
    why = str(refusal(held, 50.0, running=holder_running(held)))
    assert "which no longer runs on this machine; its lease lapses at" in why and "resume then" in why
    assert holder_running(_rec(host="another-machine")) is None
    assert holder_running(_rec(host=socket.gethostname(), pid=os.getpid())) is True
    assert "renewed while that controller lives" in str(refusal(held, 50.0, running=None))
