"""``python -m providers.raystart start ...``: Ray's own ``ray`` command, started faster.

Ray's command line imports Ray Serve's (``ray serve``) at start-up: 1.3 s of a core
of the 2.6 s its import takes, on every local cluster's critical path, for a
subcommand a cluster never runs. This entry puts an empty ``serve`` group in its
place and runs Ray's own ``main`` unchanged; every other subcommand and flag is Ray's.

One flag of ours, ``--no-ray-client``: ``ray start --head`` runs Ray Client's server
whenever its dependencies are installed (they come with ``ray[default]``), and has
no flag to leave it out (its port must be 1024 or more). With ours, Ray's command is
told they are missing, and starts no server.

Another, ``--no-api-server``, with ``--include-dashboard=false``: Ray's head still
starts the dashboard's process then (its API server, loading only the usage-statistics
module, which ``--disable-usage-stats`` leaves with nothing to do) and waits for it to
register: 0.5 s of a local cluster's 2.2 s start, and a core's second beside it. With
ours, it is not started. (Without it Ray's state API and job submission are not served:
with the dashboard off they were not served either.)

Always: Ray's ``ray start`` waits for its node's raylet to register with the GCS
through a call that looks once a second (here the raylet registers 0.7-0.8 s in, and
that call returned at 1.0 s, at times at 2.0 s). Here that wait polls the GCS every
20 ms first, then makes Ray's call, which then returns at once; any error leaves the
wait to Ray's call alone.

Another, ``--join-on-loopback``, for a worker node of a local cluster: every local
cluster runs with ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which makes Ray take
127.0.0.1 for this machine's address wherever none is given, but also makes ``ray
start --address`` refuse to start; and with it 1, Ray turns a 127.0.0.1 GCS address
into this machine's external one, where the head does not listen. With ours, this
process alone may join, at the address it is given; the node's processes keep the 0.
"""

from __future__ import annotations

import sys
import types

import click


def main() -> int:
    stub = types.ModuleType("ray.serve.scripts")
    stub.serve_cli = click.Group("serve", help="not available through providers.raystart")  # type: ignore[attr-defined]
    sys.modules.setdefault("ray.serve.scripts", stub)
    from ray.scripts import scripts

    if NO_RAY_CLIENT in sys.argv:
        sys.argv.remove(NO_RAY_CLIENT)
        scripts.get_ray_client_dependency_error = lambda: "not started: providers.raystart " + NO_RAY_CLIENT
    if NO_API_SERVER in sys.argv:
        sys.argv.remove(NO_API_SERVER)
        if "--include-dashboard=false" not in sys.argv:
            print(f"providers.raystart: {NO_API_SERVER} needs --include-dashboard=false", file=sys.stderr)
            return 2
        _no_api_server()
    if JOIN_ON_LOOPBACK in sys.argv:
        sys.argv.remove(JOIN_ON_LOOPBACK)
        _join_on_loopback()
    _prompt_registration()
    return int(scripts.main() or 0)


# How often the wait for a raylet's registration looks, and for how long before it
# leaves the rest of the wait to Ray's own call (a raylet that slow is not ours to judge).
REGISTRATION_POLL_S = 0.02
REGISTRATION_WAIT_S = 10.0


def _prompt_registration() -> None:
    from ray._private import services

    wait_blocking = services.get_node

    def get_node(gcs_address: str, node_id: str) -> object:
        try:
            _registered(gcs_address, node_id)
        except Exception:
            pass  # Ray's own wait tells what is wrong
        return wait_blocking(gcs_address, node_id)

    services.get_node = get_node


def _registered(gcs_address: str, node_id: str, timeout_s: float = REGISTRATION_WAIT_S) -> bool:
    """Whether node ``node_id`` registered with the GCS at ``gcs_address`` within ``timeout_s``."""
    import time

    from ray._raylet import GcsClient, NodeID
    from ray.core.generated.gcs_pb2 import GcsNodeInfo
    from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest

    client = GcsClient(address=gcs_address)
    selector = GetAllNodeInfoRequest.NodeSelector(node_id=NodeID.from_hex(node_id).binary())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = client.get_all_node_info(
            timeout=1, node_selectors=[selector], state_filter=GcsNodeInfo.GcsNodeState.ALIVE
        )
        if found:
            return True
        time.sleep(REGISTRATION_POLL_S)
    return False


def _no_api_server() -> None:
    from ray._private.node import Node

    def start_api_server(self: Node, *, include_dashboard: bool | None, raise_on_failure: bool) -> None:
        self._webui_url = ""  # what Ray records for a head without a dashboard

    Node.start_api_server = start_api_server  # type: ignore[method-assign]


def _join_on_loopback() -> None:
    from ray._private import ray_constants, services

    resolve = services.resolve_ip_for_localhost
    ray_constants.ENABLE_RAY_CLUSTER = True
    services.resolve_ip_for_localhost = lambda host: host if host == "127.0.0.1" else resolve(host)


NO_RAY_CLIENT = "--no-ray-client"
NO_API_SERVER = "--no-api-server"
JOIN_ON_LOOPBACK = "--join-on-loopback"


if __name__ == "__main__":
    sys.exit(main())
