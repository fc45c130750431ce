"""``python -m providers.raystart start ...``: Ray's own ``ray`` command, started faster.

Ray's command line imports Ray Serve's (``ray serve``) at start-up: 1.3 s of a core
of the 2.6 s its import takes, on every local cluster's critical path, for a
subcommand a cluster never runs. This entry puts an empty ``serve`` group in its
place and runs Ray's own ``main`` unchanged; every other subcommand and flag is Ray's.
"""

from __future__ import annotations

import sys
import types

import click


def main() -> int:
    stub = types.ModuleType("ray.serve.scripts")
    stub.serve_cli = click.Group("serve", help="not available through providers.raystart")  # type: ignore[attr-defined]
    sys.modules.setdefault("ray.serve.scripts", stub)
    from ray.scripts.scripts import main as ray_main

    return int(ray_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
