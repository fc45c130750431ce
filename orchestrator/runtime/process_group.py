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
from datetime import timedelta
from typing import Any

from ray.train.torch import TorchConfig

try:
    from ray.train._internal.worker_group import WorkerGroup as V1WorkerGroup
    from ray.train.torch.config import _set_torch_distributed_env_vars, _setup_torch_process_group, _TorchBackend
except ImportError:  # another Ray: its own TorchConfig
    BOUND = False
else:
    BOUND = True

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
    import torch.distributed as dist

    address = ray.util.get_node_ip_address()
    sock = socket.socket(address_family(address), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, 0))
        sock.listen()
        port = int(sock.getsockname()[1])
    except BaseException:
        sock.close()
        raise
    fd = sock.detach()  # the store's server owns it from here
    try:
        server = dist.TCPStore(
            address,
            port,
            is_master=True,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
            multi_tenant=True,
            master_listen_fd=fd,
            use_libuv=True,
        )
    except BaseException:
        os.close(fd)
        raise
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
