"""The driver's rendezvous, for real: torch's TCPStore on 127.0.0.1, gloo groups formed
through it, and the processes a re-formed group refuses."""

from __future__ import annotations

import multiprocessing as mp
import os
import types
from typing import Any

import pytest

from orchestrator.runtime.group.rendezvous import Assignment, GroupHost, GroupMember, Refused

pytestmark = pytest.mark.integration

RUN, GEN = "run-1", 3
KEY = b"g3" * 16
OLDER = b"g2" * 16  # what a generation-2 process holds: it cannot reach generation 3's key


def spec(generation: int = GEN) -> Any:
    return types.SimpleNamespace(run_id=RUN, generation=generation)


def member(host: GroupHost, rank: int, world: int, key: bytes, generation: int = GEN) -> GroupMember:
    return GroupMember(spec(generation), rank, world, key, "gloo", Assignment(host.address, host.port, host.epoch))


def _rank(address: str, port: int, epoch: int, rank: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    m = GroupMember(spec(), rank, 2, KEY, "gloo", Assignment(address, port, epoch))
    m.join()
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    out.put((rank, float(t.item()), m.members.mode))
    m.leave()


def test_two_processes_form_a_group_through_the_drivers_store_and_a_later_epoch_again() -> None:
    host = GroupHost(RUN, GEN, KEY, "127.0.0.1")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    for mode in ("start", "join"):
        procs = [ctx.Process(target=_rank, args=(host.address, host.port, host.epoch + 1, r, out)) for r in (0, 1)]
        for p in procs:
            p.start()
        # The record names each rank's own process: published once the pids are known.
        host.publish([p.pid for p in procs], mode, [] if mode == "start" else [1])
        got = sorted(out.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(30)
        assert got == [(0, 3.0, mode), (1, 3.0, mode)]
        assert [p.exitcode for p in procs] == [0, 0]


def test_a_replaced_rank_and_a_rank_of_an_older_generation_are_refused_before_the_group() -> None:
    host = GroupHost(RUN, GEN, KEY, "127.0.0.1")
    host.publish([os.getpid(), 999_999], "start", [])
    host.publish([os.getpid(), 424_242], "join", [1])
    # Rank 1 of epoch 0 (pid 999999 then; this process now) is not epoch 1's rank 1.
    with pytest.raises(Refused, match="replaced"):
        member(host, 1, 2, KEY).check(1)
    # A generation-2 process (a fenced attempt's) cannot check generation 3's record.
    with pytest.raises(Refused, match="not signed with this generation's key"):
        member(host, 0, 2, OLDER, generation=2).check(1)
    # Nor can one whose spec says generation 2 join a generation-3 group, whatever key it holds.
    with pytest.raises(Refused, match="fenced"):
        member(host, 0, 2, KEY, generation=2).check(1)
    # This process at its own rank is admitted.
    assert member(host, 0, 2, KEY).check(1).joining == (1,)


def test_a_survivor_waits_for_the_next_epoch_and_gives_up_past_its_limit() -> None:
    host = GroupHost(RUN, GEN, KEY, "127.0.0.1")
    host.publish([os.getpid()], "start", [])
    m = member(host, 0, 1, KEY)
    with pytest.raises(TimeoutError, match="no new group formed"):
        m.wait_for_epoch(0, limit_s=0.3)
    host.publish([os.getpid()], "join", [])
    assert m.wait_for_epoch(0, limit_s=5) == 1
    # A group of one, formed and left: the next formation in this process works too.
    m.join(1)
    m.leave()
    host.publish([os.getpid()], "join", [])
    m.join(2)
    m.leave()


def _fsdp_rank(address: str, port: int, epoch: int, rank: int, out: Any) -> None:
    """FSDP's mesh over a group that forms while the model is built: rank 1 comes late."""
    import time

    import torch
    import torch.distributed as dist

    from orchestrator.runtime.loop.fsdp import shard
    from orchestrator.wire.sections import FsdpSection

    os.environ.pop("MASTER_ADDR", None)  # as in a Ray Train worker whose group the driver hosts
    os.environ.pop("MASTER_PORT", None)
    if rank == 1:
        time.sleep(1.5)  # a replacement's peer still on its way when the spare is ready
    m = GroupMember(spec(), rank, 2, KEY, "gloo", Assignment(address, port, epoch))
    m.admitted()
    formed = m.form_in_background()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    try:
        shard(model, list(model), FsdpSection(), torch.device("cpu"), 2, group_formed=m.wait_formed)
        formed()
        loss = model(torch.ones(2, 4)).sum()
        loss.backward()
        t = torch.tensor([float(loss.item())])
        dist.all_reduce(t)
        out.put((rank, "sharded", dist.get_world_size()))
    except Exception as exc:
        out.put((rank, f"{type(exc).__name__}: {exc}"[:300], 0))
    finally:
        m.leave()


def test_fsdp_shards_over_the_group_formed_in_the_background_not_one_of_its_own() -> None:
    """A replacement that was a ready spare builds its model before its group has formed:
    its mesh waits for the group (no ``env://`` rendezvous, which nothing here sets up)."""
    host = GroupHost(RUN, GEN, KEY, "127.0.0.1")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_fsdp_rank, args=(host.address, host.port, host.epoch + 1, r, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    host.publish([p.pid for p in procs], "join", [0])
    got = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    assert got == [(0, "sharded", 2), (1, "sharded", 2)], got
    assert [p.exitcode for p in procs] == [0, 0]
