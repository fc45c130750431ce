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

import json
import os
import socket
import stat
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


class Refused(RuntimeError):
    """This process may not join the group (it was replaced, or is of an older generation)."""


def members_key(epoch: int) -> str:
    return f"members/{epoch}"


def listening_fd(address: str) -> int:
    """A socket listening on ``address`` at a port the kernel picks, handed over as its fd
    (held from now on: no other process can take the port before its new owner does)."""
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


def serve_store_on(address: str, timeout_s: float, multi_tenant: bool = False) -> Any:
    """A torch ``TCPStore`` server listening on ``address`` only (torch alone would bind
    every address of the machine), at a port the kernel picks."""
    import torch.distributed as dist

    fd = listening_fd(address)
    try:
        return dist.TCPStore(
            address,
            0,
            is_master=True,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
            multi_tenant=multi_tenant,
            master_listen_fd=fd,
            use_libuv=True,
        )
    except BaseException:
        os.close(fd)
        raise


class GroupHost:
    """The driver's end: the rendezvous store and each epoch's signed members."""

    def __init__(self, run_id: str, generation: int, key: bytes, address: str) -> None:
        self.run_id, self.generation, self.key = run_id, generation, key
        self.store = serve_store_on(address, STORE_TIMEOUT_S)
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
    # How long a collective of the formed group may take (TorchConfig.timeout_s).
    timeout_s: float = 1800.0


_assigned: list[Assignment] = []
# The driver's: ranks Ray Train is replacing in this round (one epoch names them all).
pending_replacements: set[int] = set()


def assign(
    address: str, port: int, epoch: int, watchers: dict[int, str] | None = None, timeout_s: float = 1800.0
) -> None:
    """On a worker (run by the driver through Ray Train): the store and the first epoch."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    _assigned[:] = [Assignment(address, int(port), int(epoch), rank in (watchers or {}), float(timeout_s))]


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
        self.timeout_s = where.timeout_s
        self.members: Members | None = None
        self.sockets: dict[int, int] = {}  # the formed group's: fd -> inode
        self._forming: Callable[[], None] | None = None  # form_in_background's waiter

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

        before = _socket_fds()
        dist.init_process_group(
            self.backend,
            store=dist.PrefixStore(f"group/{self.epoch}/", self.store),
            rank=self.rank,
            world_size=self.world,
            timeout=timedelta(seconds=FORM_TIMEOUT_S),
        )
        self._record_sockets({fd: ino for fd, ino in _socket_fds().items() if before.get(fd) != ino})
        # Formed: a member that never came was waited for FORM_TIMEOUT_S; a collective of
        # the group (a large model's step, a checkpoint's gather) may take the config's.
        from torch.distributed import distributed_c10d

        if hasattr(distributed_c10d, "_set_pg_timeout"):
            distributed_c10d._set_pg_timeout(timedelta(seconds=self.timeout_s))

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

        self._forming = wait
        return wait

    def wait_formed(self) -> None:
        """Until a formation ``form_in_background`` started has ended (raising what it
        raised); at once when none runs. What needs the group while the model is built
        waits here (FSDP's device mesh, ``loop.fsdp.shard``)."""
        if self._forming is not None:
            self._forming()

    def _record_sockets(self, new: dict[int, int]) -> None:
        """The group's sockets, told apart from others by the members' listeners (each
        member publishes its own in the store once the group formed)."""
        info = {fd: ends for fd in new if (ends := _endpoints(fd)) is not None}
        self.store.set(f"listeners/{self.epoch}/{self.rank}", json.dumps(sorted(listeners_of(info))))
        peers: set[tuple[str, int]] = set()
        for r in range(self.world):
            if r != self.rank:
                peers |= {(str(a), int(p)) for a, p in json.loads(self.store.get(f"listeners/{self.epoch}/{r}"))}
        self.sockets = {fd: new[fd] for fd in group_sockets(info, peers)}

    def leave(self) -> None:
        """Out of the broken group (its collectives fail from now on): a new one forms later.

        Its sockets are shut down first: gloo keeps a broken group's connections open while
        anything holds the group (a failed operation does), so a peer blocked on this rank
        (waiting for its part of a collective) would wait for the collective's timeout,
        not fail and leave too."""
        import gc

        import torch.distributed as dist

        shut(self.sockets)
        self.sockets = {}
        if dist.is_initialized():
            gc.collect()  # what still held the group (a DDP wrapper in a dropped frame) goes first
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


def _socket_fds() -> dict[int, int]:
    """This process's sockets: fd -> inode (an fd number reused later is another socket)."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if stat.S_ISSOCK(st.st_mode):
            out[int(name)] = st.st_ino
    return out


def _endpoints(fd: int) -> tuple[bool, Any, Any] | None:
    """Whether socket ``fd`` listens, its own address and its peer's (None when
    unconnected); None when the fd is no longer a socket to ask."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        listening = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
        local = sock.getsockname()
        try:
            peer = sock.getpeername()
        except OSError:
            peer = None
        return listening, local, peer
    except OSError:
        return None
    finally:
        sock.detach()


def listeners_of(info: dict[int, tuple[bool, Any, Any]]) -> set[tuple[str, int]]:
    """The listening addresses among sockets' ``_endpoints``."""
    return {(str(local[0]), int(local[1])) for listening, local, _ in info.values() if listening}


def group_sockets(info: dict[int, tuple[bool, Any, Any]], peer_listeners: set[tuple[str, int]]) -> list[int]:
    """Of the sockets that appeared while the group formed (``info``: their
    ``_endpoints``), the group's connections: those accepted on its listener and those
    made to a peer's listener (a connection some other thread opened meanwhile, to a
    store say, is neither). Its listener is never one: gloo's event loop aborts the
    process on a listener it cannot accept on."""
    own = listeners_of(info)
    return [
        fd
        for fd, (listening, local, peer) in info.items()
        if not listening and peer is not None and ((local[0], local[1]) in own or (peer[0], peer[1]) in peer_listeners)
    ]


def shut(sockets: dict[int, int]) -> int:
    """Shut down each socket still the one recorded (its inode): its peers' reads fail at
    once. The fds stay open (their owner closes them); how many were shut down."""
    done = 0
    for fd, inode in sockets.items():
        try:
            if os.fstat(fd).st_ino != inode:
                continue
            sock = socket.socket(fileno=fd)
            try:
                sock.shutdown(socket.SHUT_RDWR)
                done += 1
            finally:
                sock.detach()
        except OSError:
            continue
    return done
