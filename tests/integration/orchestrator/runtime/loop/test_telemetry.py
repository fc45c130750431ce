"""Per-worker telemetry: real measurements of this process, NVML parsed through a stand-in library.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import socket
import threading

import pytest

from orchestrator.runtime.loop.telemetry import (
    socket_bytes,
)

pytestmark = pytest.mark.integration


def _loopback_pair() -> tuple[socket.socket, socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    server.close()
    return client, peer


def test_socket_bytes_counts_what_this_process_sent_and_received_over_tcp() -> None:
    client, peer = _loopback_pair()
    try:
        before = socket_bytes()
        payload = b"x" * 300_000
        got = bytearray()

        def drain() -> None:
            while len(got) < len(payload):
                got.extend(peer.recv(1 << 20))

        reader = threading.Thread(target=drain)
        reader.start()
        client.sendall(payload)
        reader.join(timeout=10)
        assert len(got) == len(payload)
        after = socket_bytes()
        sent = sum(s for s, _ in after.values()) - sum(s for s, _ in before.values())
        recv = sum(r for _, r in after.values()) - sum(r for _, r in before.values())
        # Both ends are ours: the client's acked bytes and the peer's received bytes.
        assert sent >= len(payload)
        assert recv >= len(payload)
    finally:
        client.close()
        peer.close()
