"""A local cluster's collectives kept on the loopback interface.

Ray's own daemons and workers listen on 127.0.0.1 once the node's address is
(``--node-ip-address``, the dashboard's ``--dashboard-host``), but torch's
collective libraries choose an interface of their own: gloo the address this
machine's hostname resolves to (an external one on most machines; loopback only
where the hostname resolves to it), NCCL the first interface that is not loopback.
Each takes the interface named in its environment instead, which every process of
the cluster inherits (Ray's workers from their raylet). The process group's store
is the runtime's to bind (``orchestrator/runtime/group/process_group.py``).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Mapping
from typing import Any

# Linux's name for it, where no interface is seen holding a loopback address.
DEFAULT_INTERFACE = "lo"


def loopback_interface(interfaces: Mapping[str, Iterable[Any]]) -> str:
    """The interface holding an IPv4 loopback address, from ``psutil.net_if_addrs()``
    (each address with ``family`` and ``address``)."""
    for name, addrs in interfaces.items():
        for addr in addrs:
            if addr.family == socket.AF_INET and ipaddress.ip_address(addr.address).is_loopback:
                return name
    return DEFAULT_INTERFACE


def collectives_env(interface: str) -> dict[str, str]:
    """gloo and NCCL on ``interface`` alone (NCCL's ``=``: that name exactly, not every
    interface it begins)."""
    return {"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": f"={interface}"}
