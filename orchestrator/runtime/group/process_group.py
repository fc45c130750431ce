"""Ray Train's torch process group, its store listening where it is reached and nowhere else.

Ray Train's own setup (``TorchConfig``) has rank 0 start torch's ``TCPStore`` server on
a free port, and torch binds that server to every address of the machine (``[::]``),
whatever ``MASTER_ADDR`` says: on a local cluster, a port the machine's other addresses
reach. Here rank 0 binds the store's socket itself, to its node's address (what
``MASTER_ADDR`` is set to: 127.0.0.1 on a local cluster, the node's own address on a
cloud's), and starts the store's server on it (``master_listen_fd``) as a multi-tenant
one, which torch's ``env://`` rendezvous in the same process then shares rather than
binding its own. The rest is Ray Train's own: the same backend, addresses, environment,
ranks and timeout, the same ``init_process_group``.

Should a Ray release move what this builds on, ``torch_config`` falls back to Ray's own
``TorchConfig``: the store listens on every address again, and the loopback test says so.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ray.train.torch import TorchConfig

try:
    from ray.train._internal.worker_group import WorkerGroup as V1WorkerGroup
    from ray.train.torch.config import _set_torch_distributed_env_vars, _setup_torch_process_group, _TorchBackend
except ImportError:  # another Ray: its own TorchConfig
    BOUND = False
else:
    BOUND = True
try:
    from ray.train.backend import Backend
    from ray.train.v2._internal.execution.worker_group import ReplicaGroup
except ImportError:  # a Ray without replica groups: every recovery restarts the world
    REPLICAS = False
else:
    REPLICAS = BOUND and hasattr(Backend, "has_replica_groups")

# The backends set up here; any other (TPUs' and their slices) is Ray Train's alone.
BACKENDS = ("gloo", "nccl")

# Rank 0's store server, from serve_store until its process group holds it.
_served: list[Any] = []


def address_family(address: str) -> socket.AddressFamily:
    """The family of a node address as Ray gives it (an IPv6 one has a colon)."""
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def torch_config(backend: str) -> TorchConfig:
    """Ray Train's ``TorchConfig(backend=backend)``, its store bound to the master's
    address where this Ray allows it."""
    if BOUND and backend in BACKENDS:
        return BoundStoreTorchConfig(backend=backend)
    return TorchConfig(backend=backend)


def serve_store(timeout_s: float) -> tuple[str, int]:
    """On rank 0: the store's server on this node's address, at a port the kernel picks
    (held from now on: no other process can take it before the store does)."""
    import ray

    from orchestrator.runtime.group.rendezvous import serve_store_on

    address = ray.util.get_node_ip_address()
    server = serve_store_on(address, timeout_s, multi_tenant=True)
    port = int(server.port)
    _served.append(server)
    return address, port


def set_master(address: str, port: int) -> None:
    """On every rank: where the ``env://`` rendezvous finds rank 0's store."""
    os.environ["MASTER_ADDR"] = address
    os.environ["MASTER_PORT"] = str(port)


def join_group(backend: str, world_rank: int, world_size: int, timeout_s: int) -> None:
    """On every rank: Ray Train's own process group setup; rank 0's rendezvous takes
    the server ``serve_store`` started (torch keeps a multi-tenant one per port)."""
    try:
        _setup_torch_process_group(
            backend=backend,
            world_rank=world_rank,
            world_size=world_size,
            init_method="env://",
            timeout_s=timeout_s,
        )
    finally:
        _served.clear()  # the group's store holds the server now, or there is no group


if BOUND:

    class BoundStoreBackend(_TorchBackend):
        """Ray Train's torch backend with the store started by ``serve_store``."""

        def on_start(self, worker_group: Any, backend_config: Any) -> None:
            config = backend_config
            if config.backend not in BACKENDS or config.init_method != "env":
                super().on_start(worker_group, backend_config)
                return
            import ray

            address, port = worker_group.execute_single(0, serve_store, config.timeout_s)
            worker_group.execute(set_master, address=address, port=port)
            if not isinstance(worker_group, V1WorkerGroup):
                worker_group.execute(_set_torch_distributed_env_vars)
            size = len(worker_group)
            joined = [
                worker_group.execute_single_async(
                    rank,
                    join_group,
                    backend=config.backend,
                    world_rank=rank,
                    world_size=size,
                    timeout_s=config.timeout_s,
                )
                for rank in range(size)
            ]
            ray.get(joined)

    class BoundStoreTorchConfig(TorchConfig):
        @property
        def backend_cls(self) -> type[_TorchBackend]:
            return BoundStoreBackend


def survivor_config(backend: str, run_id: str, generation: int) -> TorchConfig:
    """A ``TorchConfig`` whose workers are each a replica group of their own (Ray Train then
    replaces a lost worker and leaves the others running) and whose process group the
    workers form themselves through the driver's rendezvous (orchestrator/runtime/group/rendezvous.py)."""
    return SurvivorTorchConfig(backend=backend, run_id=run_id, generation=generation)


if REPLICAS:

    class SurvivorBackend(_TorchBackend):
        """Publishes each epoch's members; the workers join it (``rendezvous.GroupMember``).

        The whole group's start publishes a "start" epoch (every rank restores from the
        store); a replacement's start publishes a "join" epoch naming the survivors'
        processes and the new one (state from peers). One instance serves the controller
        for the attempt: it keeps the whole group to name the survivors' pids."""

        has_replica_groups = True

        def __init__(self) -> None:
            super().__init__()
            self.host: Any = None
            self.group: Any = None
            # Rank: node, of the one worker per node that watches the node's notices (each
            # worker is a replica group of its own, so Ray's local rank is 0 for all).
            self.watchers: dict[int, str] = {}
            self.joining: list[int] = []  # replaced this round, their epoch not yet published

        def on_start(self, worker_group: Any, backend_config: Any) -> None:
            import ray

            from orchestrator.runtime.group.rendezvous import GroupHost, assign, node_watchers, pending_replacements
            from orchestrator.wire import runkey

            config = backend_config
            if self.host is None:
                key = runkey.require().generation_key(config.generation)
                if key is None:
                    raise RuntimeError(f"no key for generation {config.generation}: the group cannot be signed")
                self.host = GroupHost(config.run_id, config.generation, key, ray.util.get_node_ip_address())
            replacing = isinstance(worker_group, ReplicaGroup) and self.group is not None
            if not replacing:
                self.group = worker_group
            every = sorted(self.group.get_workers(), key=lambda w: w.distributed_context.world_rank)
            nodes = {w.distributed_context.world_rank: str(w.metadata.node_id) for w in every}
            self.watchers = node_watchers(nodes, self.watchers if replacing else {})
            # Ranks Ray Train replaces in one round join one epoch, published with the last:
            # an epoch naming a rank not yet replaced would wait for a dead process.
            new = [w.distributed_context.world_rank for w in worker_group.get_workers()]
            self.joining = [*self.joining, *new] if replacing else []
            epoch = self.host.epoch + 1
            worker_group.execute(_set_torch_distributed_env_vars)
            worker_group.execute(assign, self.host.address, self.host.port, epoch, self.watchers, config.timeout_s)
            if not (pending_replacements - set(self.joining)):
                pids = [int(w.metadata.pid) for w in every]
                self.host.publish(pids, "join" if replacing else "start", sorted(self.joining))
                self.joining = []

        def on_shutdown(self, worker_group: Any, backend_config: Any) -> None:
            # A lost worker's replica group is shut down with the worker dead: nothing to
            # tear down there, and the survivors leave their broken group themselves.
            if not isinstance(worker_group, ReplicaGroup):
                super().on_shutdown(worker_group, backend_config)

    class SurvivorTorchConfig(TorchConfig):
        def __init__(self, *, run_id: str, generation: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.run_id, self.generation = run_id, generation

        @property
        def backend_cls(self) -> type[_TorchBackend]:
            return SurvivorBackend
