"""``python -m providers.raystart start ...``: Ray's own ``ray`` command, started faster.

Ray's command line imports Ray Serve's (``ray serve``) at start-up: 1.3 s of a core
of the 2.6 s its import takes, on every local cluster's critical path, for a
subcommand a cluster never runs. This entry puts an empty ``serve`` group in its
place and runs Ray's own ``main`` unchanged; every other subcommand and flag is Ray's.

One flag of ours, ``--no-ray-client``: ``ray start --head`` runs Ray Client's server
whenever its dependencies are installed (they come with ``ray[default]``), and has
no flag to leave it out (its port must be 1024 or more). With ours, Ray's command is
told they are missing, and starts no server.
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
    return int(scripts.main() or 0)


NO_RAY_CLIENT = "--no-ray-client"


if __name__ == "__main__":
    sys.exit(main())
