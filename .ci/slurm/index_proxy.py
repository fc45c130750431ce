"""A CONNECT proxy on a unix socket that lets the Slurm node reach the package index only.

The node's network namespace has loopback alone; socat there forwards 127.0.0.1:<port> to
this socket. The allowed hosts come from this machine's pip configuration at run time
(index-url and extra-index-url, and the default index's file host when pip uses the
default): no host name is written in the repository.
"""

from __future__ import annotations

import asyncio
import os
import sys
from urllib.parse import urlparse


def allowed_hosts() -> set[str]:
    from pip._internal.configuration import Configuration
    from pip._internal.models.index import PyPI

    conf = Configuration(isolated=False)
    conf.load()
    values = dict(conf.items())
    urls: list[str] = []
    for key, value in values.items():
        if key.endswith(("index-url", "extra-index-url")):
            urls += str(value).split()
    urls += [u for k, v in os.environ.items() if k in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL") for u in v.split()]
    if not any(k.endswith(".index-url") for k in values) and "PIP_INDEX_URL" not in os.environ:
        urls += [PyPI.simple_url, "https://" + PyPI.file_storage_domain]
    return {h for h in (urlparse(u).hostname for u in urls if u.startswith("http")) if h}


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, allowed: set[str]) -> None:
    try:
        await _connect(reader, writer, allowed)
    except Exception as exc:  # one client's failure is not the proxy's
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        writer.close()


async def _open(host: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    # Name resolution here fails now and then under load: a few tries before giving up.
    for attempt in range(4):
        try:
            return await asyncio.wait_for(asyncio.open_connection(host, 443), 30)
        except OSError:
            if attempt == 3:
                raise
            await asyncio.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


async def _connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, allowed: set[str]) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
    host, _, port = target.rpartition(":")
    if method != "CONNECT" or host not in allowed or port != "443":
        writer.write(b"HTTP/1.1 403 Forbidden\r\n\r\n")
        await writer.drain()
        writer.close()
        print(f"refused {method} {target}", file=sys.stderr, flush=True)
        return
    try:
        up_reader, up_writer = await _open(host)
    except OSError:
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
        await writer.drain()
        writer.close()
        raise
    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    await writer.drain()
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def main(path: str) -> None:
    allowed = allowed_hosts()
    print(f"allowing CONNECT to {sorted(allowed)}", file=sys.stderr, flush=True)
    if os.path.exists(path):
        os.unlink(path)
    server = await asyncio.start_unix_server(lambda r, w: _serve(r, w, allowed), path)
    os.chmod(path, 0o666)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
