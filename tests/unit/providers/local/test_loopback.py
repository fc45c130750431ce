"""The loopback interface a local cluster's collectives are told to use."""

from __future__ import annotations

import socket
from collections import namedtuple

import pytest

from providers.local.loopback import DEFAULT_INTERFACE, collectives_env, loopback_interface

pytestmark = pytest.mark.unit

Addr = namedtuple("Addr", "family address")


def test_the_interface_holding_an_ipv4_loopback_address() -> None:
    interfaces = {
        "eth0": [Addr(socket.AF_INET, "192.0.2.2"), Addr(socket.AF_INET6, "::1")],
        "lo0": [Addr(socket.AF_INET6, "::1"), Addr(socket.AF_INET, "127.0.0.1")],
    }
    assert loopback_interface(interfaces) == "lo0"
    assert loopback_interface({"lo9": [Addr(socket.AF_INET, "127.0.1.1")]}) == "lo9"


def test_linux_name_when_none_holds_one() -> None:
    assert loopback_interface({}) == DEFAULT_INTERFACE == "lo"
    assert loopback_interface({"eth0": [Addr(socket.AF_INET, "192.0.2.2"), Addr(socket.AF_PACKET, "")]}) == "lo"


def test_gloo_by_name_and_nccl_by_exact_name() -> None:
    assert collectives_env("lo") == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "=lo"}
