"""Where in a user's code an exception was raised: the ``file:line`` a user error names.

The innermost frame of the traceback that is neither the orchestrator's own nor a
library's (the standard library, site-packages: torch, Ray): for a shape mismatch deep
in torch, the line of the user's ``forward`` that called it.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from collections.abc import Iterable, Sequence

# Sent over the control channel, which bounds it too (wire.schema.MAX_SITE).
MAX_SITE = 400

_PACKAGES = ("orchestrator", "recovery", "providers")


def _project_root() -> str:
    """The folder that holds this project's packages (this file is orchestrator/runtime/loop/user_site.py)."""
    return os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def our_roots() -> tuple[str, ...]:
    """The folders of this project's own packages."""
    here = _project_root()
    return tuple(os.path.realpath(os.path.join(here, name)) + os.sep for name in _PACKAGES)


def platform_roots() -> tuple[str, ...]:
    """The folders whose files are not the user's: this project's packages and every
    library folder of the interpreter."""
    here = _project_root()
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


def user_traceback(exc: BaseException, roots: Sequence[str] | None = None) -> str:
    """``exc``'s traceback as Python prints it, without the frames of this project's own
    code (the loop that called the user's): what the user wrote, and the libraries it
    called, from the outermost frame in. Every frame (however ``sys.tracebacklimit`` is
    set) when all of them are ours."""
    ours = our_roots() if roots is None else tuple(roots)
    frames = traceback.extract_tb(exc.__traceback__, limit=sys.maxsize)
    kept = [f for f in frames if not any(os.path.realpath(f.filename).startswith(r) for r in ours)]
    if not kept:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=sys.maxsize))
    left = len(frames) - len(kept)
    head = "Traceback (most recent call last):\n"
    note = f"  ({left} frame{'s' if left != 1 else ''} of the orchestrator left out)\n" if left else ""
    body = "".join(traceback.format_list(traceback.StackSummary.from_list(kept)))
    return head + note + body + "".join(traceback.format_exception_only(type(exc), exc))
