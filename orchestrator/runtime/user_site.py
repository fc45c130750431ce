"""Where in a user's code an exception was raised: the ``file:line`` a user error names.

The innermost frame of the traceback that is neither the orchestrator's own nor a
library's (the standard library, site-packages: torch, Ray): for a shape mismatch deep
in torch, the line of the user's ``forward`` that called it.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterable, Sequence

# Sent over the control channel, which bounds it too (wire.schema.MAX_SITE).
MAX_SITE = 400

_PACKAGES = ("orchestrator", "recovery", "providers")


def platform_roots() -> tuple[str, ...]:
    """The folders whose files are not the user's: this project's packages and every
    library folder of the interpreter."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ours = [os.path.join(here, name) for name in _PACKAGES]
    paths = sysconfig.get_paths()
    libs = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    return tuple(os.path.realpath(p) + os.sep for p in [*ours, *libs])


def innermost_user_frame(frames: Iterable[tuple[str, int]], roots: Sequence[str]) -> str | None:
    """``file:line`` of the last of ``frames`` (outermost first) whose file lies under none
    of ``roots`` and is a real file name (not ``<string>``); None when there is none."""
    site = None
    for name, line in frames:
        if not name or name.startswith("<"):
            continue
        real = os.path.realpath(name)
        if any(real.startswith(root) for root in roots):
            continue
        site = f"{name}:{line}"
    if site is not None and len(site) > MAX_SITE:
        site = "..." + site[-(MAX_SITE - 3) :]
    return site


def user_site(exc: BaseException, roots: Sequence[str] | None = None) -> str | None:
    """The user's ``file:line`` where ``exc`` was raised (``innermost_user_frame``)."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    return innermost_user_frame(frames, platform_roots() if roots is None else roots)
