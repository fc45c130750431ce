"""A TCP fault proxy for storage drills: refuse, hang or slow a store's traffic.

It listens on 127.0.0.1 and forwards to the store's endpoint; the chaos injector
switches its mode. Only for stores behind a plain-http endpoint (emulators, a
local S3/GCS server): a TLS endpoint's certificate would not match the proxy.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass
from enum import StrEnum


class Mode(StrEnum):
    PASS = "pass"
    REFUSE = "refuse"  # connections refused, open ones cut
    BLACKHOLE = "blackhole"  # connections accepted, nothing ever answered
    SLOW = "slow"  # latency per chunk and a bandwidth cap


@dataclass
class Shape:
    mode: Mode = Mode.PASS
    latency_s: float = 0.0
    bandwidth_bps: float | None = None


CHUNK = 64 * 1024


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.shape = Shape()
        self.port = _free_port()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"faultproxy-{self.port}", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        self._call(self._close(listener=True))
        self._call(self._cancel_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _cancel_all(self) -> None:
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def set(self, shape: Shape) -> None:
        self.shape = shape
        if shape.mode is Mode.REFUSE:
            self._call(self._close(listener=True))
        elif self._server is None:
            self._call(self._listen())

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, reuse_address=True)

    async def _close(self, listener: bool) -> None:
        if listener and self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                writer.transport.abort()
                return
            while self.shape.mode is Mode.BLACKHOLE:
                await asyncio.sleep(0.05)  # held, never answered, until the fault ends
            shape = self.shape
            if shape.mode is Mode.SLOW:
                delay = shape.latency_s + (len(data) / shape.bandwidth_bps if shape.bandwidth_bps else 0.0)
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
