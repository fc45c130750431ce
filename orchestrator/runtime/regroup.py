"""The worker group's process group, formed again around the workers that survived.

Ray Train (2.60 and later) can replace one failed worker of a group and leave the
others running (its "replica groups": each worker is one here). It does not re-form
the collective: that is this module's. The driver hosts a small rendezvous store
(torch's ``TCPStore``, on the head node's address) and, at each formation, publishes
an *epoch*: the members' pids by rank, signed with the attempt generation's key
(``recovery/membership.py``). Every rank joins the newest epoch through its own prefix
of that store: the survivors, once they have left the broken group, and the
replacement, as it starts. A process that the record does not name at its rank (a
rank that was replaced, or one of an older generation, which cannot check the record's
signature) is refused before it touches the group.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from recovery.membership import Members, MembershipError, admit

# How long a survivor waits for the driver to publish the epoch that replaces a lost
# worker (a replacement node may take a while to come up) before it gives up and lets
# Ray Train restart the whole group.
EPOCH_WAIT_S = 600.0
EPOCH_POLL_S = 0.05
# How long one formation may take once every member has its epoch; past it, a member
# looks for a newer epoch (a second loss during the first's recovery).
FORM_TIMEOUT_S = 60.0
STORE_TIMEOUT_S = 30.0
EPOCH_KEY = "epoch"


def why_not_survivors(spec: Any) -> str | None:
    """Why this attempt restarts its whole worker group on a lost worker (None: survivors
    keep their processes). Pure: the spec alone (the Ray in use is checked apart)."""
    trainer = spec.trainer
    if spec.survivors == "off":
        return "recovery.survivors=off"
    if spec.hpo is not None:
        return "a search's trials restart on their own"
    if spec.job.train_func:
        return "a job.train_func keeps its own state: its group restarts"
    if trainer.workers < 2:
        return "one worker: nothing survives its loss"
    if trainer.strategy != "ddp":
        return f"trainer.strategy={trainer.strategy}: each rank holds only its shards"
    if trainer.gpus_per_worker > 0:
        return "GPU workers: an NCCL group broken by a lost peer is not re-formed yet"
    if spec.data.loader == "ray_data":
        return "data.loader=ray_data: its split is Ray Data's, restarted with the group"
    return None


class Refused(RuntimeError):
    """This process may not join the group (it was replaced, or is of an older generation)."""


def members_key(epoch: int) -> str:
    return f"members/{epoch}"


def _bound_socket(address: str) -> int:
    """A listening socket on ``address`` at a port the kernel picks, its fd handed over."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, 0))
        sock.listen()
    except BaseException:
        sock.close()
        raise
    return sock.detach()


class GroupHost:
    """The driver's end: the rendezvous store and each epoch's signed members."""

    def __init__(self, run_id: str, generation: int, key: bytes, address: str) -> None:
        import torch.distributed as dist

        self.run_id, self.generation, self.key = run_id, generation, key
        fd = _bound_socket(address)
        try:
            self.store = dist.TCPStore(
                address,
                0,
                is_master=True,
                timeout=timedelta(seconds=STORE_TIMEOUT_S),
                wait_for_workers=False,
                master_listen_fd=fd,
                use_libuv=True,
            )
        except BaseException:
            os.close(fd)
            raise
        self.address, self.port = address, int(self.store.port)
        self.epoch = -1

    def publish(self, pids: list[int], mode: str, joining: list[int]) -> int:
        """A new epoch with these members (``pids[r]``: rank r's process); its number."""
        self.epoch += 1
        members = Members(self.run_id, self.generation, self.epoch, tuple(pids), mode, tuple(joining))
        self.store.set(members_key(self.epoch), members.to_wire(self.key))
        self.store.set(EPOCH_KEY, str(self.epoch))  # last: a member that sees it finds the record
        return self.epoch


def node_watchers(nodes: dict[int, str], watching: dict[int, str]) -> dict[int, str]:
    """The ranks that watch their node's notices (one per node): ``nodes`` is every rank's
    node now, ``watching`` the watchers before (rank: node). A watcher still on its node
    stays; a node without one gets its lowest rank. Pure."""
    kept = {r: n for r, n in watching.items() if nodes.get(r) == n}
    for rank in sorted(nodes):
        if nodes[rank] not in kept.values():
            kept[rank] = nodes[rank]
    return kept


@dataclass(frozen=True)
class Assignment:
    """What the driver tells a worker: where the store is, the epoch to join first, and
    whether it watches its node's notices (one worker per node does)."""

    address: str
    port: int
    epoch: int
    watch: bool = False


_assigned: list[Assignment] = []


def assign(address: str, port: int, epoch: int, watchers: dict[int, str] | None = None) -> None:
    """On a worker (run by the driver through Ray Train): the store and the first epoch."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    _assigned[:] = [Assignment(address, int(port), int(epoch), rank in (watchers or {}))]


def assignment() -> Assignment | None:
    return _assigned[0] if _assigned else None


_joined: list[GroupMember] = []


def joined(member: GroupMember) -> None:
    """This process's member of the group from now on."""
    _joined[:] = [member]


def current() -> GroupMember | None:
    return _joined[0] if _joined else None


class GroupMember:
    """A worker's end: joins an epoch's group, leaves a broken one, waits for the next."""

    def __init__(self, spec: Any, rank: int, world: int, key: bytes | None, backend: str, where: Assignment) -> None:
        import torch.distributed as dist

        self.spec, self.rank, self.world, self.key, self.backend = spec, rank, world, key, backend
        self.store = dist.TCPStore(
            where.address, where.port, is_master=False, timeout=timedelta(seconds=STORE_TIMEOUT_S), use_libuv=True
        )
        self.epoch = where.epoch
        self.members: Members | None = None

    def _record(self, epoch: int) -> Members:
        try:
            return Members.from_wire(self.store.get(members_key(epoch)), self.key)
        except MembershipError as exc:
            raise Refused(str(exc)) from None

    def check(self, epoch: int) -> Members:
        """The record of ``epoch`` if it admits this process; Refused with the reason if not."""
        members = self._record(epoch)
        reason = admit(
            members,
            run_id=self.spec.run_id,
            generation=self.spec.generation,
            epoch=epoch,
            rank=self.rank,
            pid=os.getpid(),
        )
        if reason is not None:
            raise Refused(reason)
        return members

    def join(self, epoch: int | None = None) -> Members:
        """Form the group of ``epoch`` (default: the assigned one) with its other members."""
        members = self.admitted(epoch)
        self.form()
        return members

    def admitted(self, epoch: int | None = None) -> Members:
        """The record of ``epoch`` (default: the assigned one), which admits this process;
        Refused if it does not. From here on it is this member's epoch."""
        epoch = self.epoch if epoch is None else epoch
        members = self.check(epoch)
        self.epoch, self.members, self.world = epoch, members, len(members.pids)
        return members

    def form(self) -> None:
        """Form the admitted epoch's group with its other members (blocks until all come)."""
        import torch.distributed as dist

        dist.init_process_group(
            self.backend,
            store=dist.PrefixStore(f"group/{self.epoch}/", self.store),
            rank=self.rank,
            world_size=self.world,
            timeout=timedelta(seconds=FORM_TIMEOUT_S),
        )

    def form_in_background(self) -> Callable[[], None]:
        """``form`` in a thread, while this process builds its model and data (no collective
        may run meanwhile); the returned function waits for it and raises what it raised."""
        failed: list[BaseException] = []

        def run() -> None:
            try:
                self.form()
            except BaseException as exc:  # handed to the waiter
                failed.append(exc)

        thread = threading.Thread(target=run, name="group-formation", daemon=True)
        thread.start()

        def wait() -> None:
            thread.join()
            if failed:
                raise failed[0]

        return wait

    def leave(self) -> None:
        """Out of the broken group (its collectives fail from now on): a new one forms later."""
        import torch.distributed as dist

        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                pass  # a group whose peer died may not tear down cleanly: it is dropped all the same

    def current_epoch(self) -> int:
        return int(self.store.get(EPOCH_KEY))

    def wait_for_epoch(self, after: int, limit_s: float = EPOCH_WAIT_S) -> int:
        """The first epoch newer than ``after`` the driver publishes; TimeoutError past ``limit_s``."""
        deadline = time.monotonic() + limit_s
        while True:
            epoch = self.current_epoch()
            if epoch > after:
                return epoch
            if time.monotonic() > deadline:
                raise TimeoutError(f"no new group formed within {limit_s:g}s after epoch {after}")
            time.sleep(EPOCH_POLL_S)
