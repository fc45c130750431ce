"""The nodes of a SkyPilot cluster joining one Ray, run on the nodes by the task's run
command (``providers.skypilot.scripts.RUN_SCRIPT``)::

    python -m providers.skypilot.nodes wait HOST:PORT NODES TIMEOUT_S [--failed FILE] [--key KEY]

waits until ``NODES`` Ray nodes are alive in the cluster whose GCS is at ``HOST:PORT``.
The head (rank 0) runs it with the cluster's node count before it says Ray is ready, so
the runtime never starts on a part of the cluster; each worker node runs it with 1 (the
head answering) before it joins, as SkyPilot's own Ray template waits for the head's
health. Past ``TIMEOUT_S`` it exits 1 with one line saying how many joined, also written
to ``--failed`` (which the provider's launch reads back over ssh).

The cluster's token comes from the environment (RAY_AUTH_MODE, RAY_AUTH_TOKEN), as for
``ray start``. Ray's GCS client is the only Ray import: no driver joins the cluster.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

EXIT_MISSING = 1
EXIT_USAGE = 2
# Between two counts: a node joins in seconds, so a second more is nothing to wait.
POLL_S = 1.0
# One count's answer from the GCS; a GCS that answers the port but not this is not up.
COUNT_TIMEOUT_S = 5.0


class NodesMissing(Exception):
    """Fewer nodes than wanted joined within the timeout; the message is the user's."""


@dataclass
class Seen:
    """What the last count saw: how many nodes are alive, or why none could be counted."""

    alive: int = 0
    error: str = ""


def missing_message(address: str, want: int, seen: Seen, timeout_s: float, key: str) -> str:
    """The one line a person reads when the cluster's nodes did not all join."""
    if want == 1:
        return (
            f"the Ray head at {address} did not answer within {timeout_s:g}s"
            f"{f' ({seen.error})' if seen.error else ''}; this node cannot join it"
        )
    return (
        f"only {seen.alive} of {want} Ray nodes ({key}) joined the head at {address} within "
        f"{timeout_s:g}s{f' ({seen.error})' if seen.error else ''}; the others could not start Ray or "
        "reach the head's port: see their output with sky logs <cluster>"
    )


def wait_for_nodes(
    count: Callable[[], Seen],
    want: int,
    timeout_s: float,
    address: str,
    key: str = "cloud.regions.<name>.nodes",
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Seen:
    """Count until ``want`` nodes are alive (the last count), or NodesMissing past
    ``timeout_s``. A count that fails (the head not up yet) is a count of none."""
    deadline = clock() + timeout_s
    while True:
        seen = count()
        if seen.alive >= want:
            return seen
        if clock() >= deadline:
            raise NodesMissing(missing_message(address, want, seen, timeout_s, key))
        sleep(poll_s)


class GcsCounter:
    """Alive nodes by the GCS's own node table. The port is probed first: Ray's client
    takes about 40 s to give up on a GCS that is not there, a connect a fraction of one."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self.host, self.port = host, int(port)
        self._client: Any = None

    def __call__(self) -> Seen:
        try:
            with socket.create_connection((self.host, self.port), timeout=COUNT_TIMEOUT_S):
                pass
        except OSError as exc:
            return Seen(0, f"{self.address}: {exc.strerror or exc}")
        try:
            from ray._raylet import GcsClient
            from ray.core.generated import gcs_pb2

            if self._client is None:
                self._client = GcsClient(address=self.address)
            nodes = self._client.get_all_node_info(timeout=COUNT_TIMEOUT_S)
        except Exception as exc:
            if type(exc).__name__ == "AuthenticationError":
                # The wrong token never turns right: fail now, not at the timeout.
                raise NodesMissing(
                    f"the Ray head at {self.address} refused this node's token (RAY_AUTH_TOKEN): "
                    "the cluster's nodes must share one"
                ) from None
            self._client = None
            return Seen(0, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
        alive = sum(1 for info in nodes.values() if info.state == gcs_pb2.GcsNodeInfo.ALIVE)
        return Seen(alive)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m providers.skypilot.nodes", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    wait = sub.add_parser("wait", help="wait until NODES Ray nodes are alive")
    wait.add_argument("address", help="the head's GCS, HOST:PORT")
    wait.add_argument("nodes", type=int)
    wait.add_argument("timeout_s", type=float)
    wait.add_argument("--failed", default="", help="a file that gets the error's line")
    wait.add_argument("--key", default="cloud.regions.<name>.nodes", help="the config key that set NODES")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.timeout_s < 0 or ":" not in args.address:
        print(f"error: sky_nodes wait {args.address} {args.nodes} {args.timeout_s}: bad arguments", file=sys.stderr)
        return EXIT_USAGE
    t0 = time.monotonic()
    try:
        seen = wait_for_nodes(GcsCounter(args.address), args.nodes, args.timeout_s, args.address, args.key)
    except NodesMissing as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        if args.failed:
            tmp = f"{args.failed}.tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(f"{exc}\n")
            os.replace(tmp, args.failed)
        return EXIT_MISSING
    print(f"sky_nodes: {seen.alive} Ray node(s) alive at {args.address} after {time.monotonic() - t0:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
