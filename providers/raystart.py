"""``python -m providers.raystart start ...``: Ray's own ``ray`` command, started faster.

Ray's command line imports Ray Serve's (``ray serve``) at start-up: 1.3 s of a core
of the 2.6 s its import takes, on every local cluster's critical path, for a
subcommand a cluster never runs. This entry puts an empty ``serve`` group in its
place and runs Ray's own ``main`` unchanged; every other subcommand and flag is Ray's.

One flag of ours, ``--no-ray-client``: ``ray start --head`` runs Ray Client's server
whenever its dependencies are installed (they come with ``ray[default]``), and has
no flag to leave it out (its port must be 1024 or more). With ours, Ray's command is
told they are missing, and starts no server.

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
    if JOIN_ON_LOOPBACK in sys.argv:
        sys.argv.remove(JOIN_ON_LOOPBACK)
        _join_on_loopback()
    return int(scripts.main() or 0)


def _join_on_loopback() -> None:
    from ray._private import ray_constants, services

    resolve = services.resolve_ip_for_localhost
    ray_constants.ENABLE_RAY_CLUSTER = True
    services.resolve_ip_for_localhost = lambda host: host if host == "127.0.0.1" else resolve(host)


NO_RAY_CLIENT = "--no-ray-client"
JOIN_ON_LOOPBACK = "--join-on-loopback"


if __name__ == "__main__":
    sys.exit(main())
