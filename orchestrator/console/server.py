"""``python -m orchestrator action=console``: serve the console until Ctrl-C.

The socket is bound here, before anything is printed, so that the one URL printed
(with this start's token, as Jupyter prints its own) names the port actually taken
(``console.port=0``: a free one). Uvicorn serves it; its access log stays off (each line
would hold a URL, the first one the token). Ctrl-C or SIGTERM ends it with exit status 0
and no traceback: a console holds nothing to lose.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

from orchestrator.config.schema import Config
from orchestrator.errors import error, printable
from orchestrator.runstate import rundir
from recovery.controlkey import ControlKeyError, read_key

if TYPE_CHECKING:
    from orchestrator.console.storeview import StoreView

# Seconds a request still being answered gets once Ctrl-C is pressed.
GRACE_S = 3


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``'s first address and ``port`` (0: a free one); OSError
    when it cannot be had (taken, not this machine's, a name that does not resolve)."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def is_loopback(sock: socket.socket) -> bool:
    return ipaddress.ip_address(sock.getsockname()[0]).is_loopback


def url_of(sock: socket.socket, token: str) -> str:
    """The URL to open: the address bound (a wildcard one: this machine's name), with the token."""
    address, port = sock.getsockname()[:2]
    ip = ipaddress.ip_address(address)
    host = socket.gethostname() if ip.is_unspecified else (f"[{address}]" if ip.version == 6 else address)
    return f"http://{host}:{port}/?token={token}"


def _quiet(signum: int, frame: FrameType | None) -> None:
    """Uvicorn raises the signal that stopped it again once it has shut down: nothing more to do."""


def store_view(cfg: Config) -> StoreView | None:
    """cloud.control_store's runs, read in the background, when one is named and this
    machine has the control key (without it, one line says how to see them)."""
    from orchestrator.console.storeview import StoreView

    store = cfg.cloud.control_store
    if not store:
        return None
    try:
        key = read_key(cfg.cloud.control_key)
    except ControlKeyError as exc:
        print(f"note: cloud.control_store: its runs are not shown: {exc}", file=sys.stderr)
        return None
    if key is None:
        from orchestrator.commands.remote import no_key_note

        print(no_key_note(cfg.cloud.control_key, "shown"), file=sys.stderr)
        return None
    home = cfg.home_path
    view = StoreView(str(store), cfg.cloud.control_options, key, lambda: _names(rundir.runs_path(home)))
    view.start()
    return view


def _names(folder: str) -> set[str]:
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


def main(cfg: Config) -> int:
    import uvicorn

    from orchestrator.console.app import Console, build
    from orchestrator.console.security import Secrets

    host, home = cfg.console.host, cfg.home_path
    try:
        sock = bind(host.strip("[]"), cfg.console.port)  # an IPv6 address as a URL writes it, too
    except OSError as exc:
        return error(
            f"console.port: cannot listen on {host}:{cfg.console.port} ({exc.strerror or exc}); "
            "give another port, or console.port=0 for a free one"
        )
    keys = Secrets.new(sock.getsockname()[1])
    store = store_view(cfg)
    console = Console(home, keys, cfg.console.actions, store)
    app = build(console)
    # The home read while the user opens the URL: the first page finds it read.
    threading.Thread(target=console.warm, name="console-warm", daemon=True).start()
    if not is_loopback(sock):
        print(
            f"warning: console.host={printable(host)}: the console is reachable from other machines; the token "
            "guards it, but over plain HTTP anyone on the path can read it: prefer the default (127.0.0.1) "
            "and an SSH tunnel",
            file=sys.stderr,
        )
    actions = "" if cfg.console.actions else " (read-only: console.actions=false)"
    also = f" and in {printable(store.store)}" if store is not None else ""
    print(f"console of the runs under {printable(home)}{also}{actions}; Ctrl-C stops it. Open:", flush=True)
    print(f"    {url_of(sock, keys.token)}", flush=True)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        http="h11",
        ws="none",
        server_header=False,
        timeout_graceful_shutdown=GRACE_S,
    )
    previous = {sig: signal.signal(sig, _quiet) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # a second Ctrl-C before uvicorn's handlers were in place
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        if store is not None:
            store.close()
    print("console stopped", flush=True)
    return 0
