"""``main()`` in-process where a refused input can do no harm: nothing launches, and what
would have been written shows (the fuzz tests of the command line and of run files)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under root with its mode, size and mtime: what a write would change."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def _never(what: str) -> Callable[..., object]:
    def fail(*args: object, **kwargs: object) -> object:
        pytest.fail(f"{what} was called: a refused input must launch nothing")

    return fail


def launch_nothing(monkeypatch: pytest.MonkeyPatch, home: Path, user: Path, cwd: Path) -> None:
    """ORCHESTRATOR_HOME, HOME and the working directory set to these folders; every
    provider, the controller, the supervisor, preflight and plan fail the test if called."""
    import orchestrator.commands.plan
    import orchestrator.commands.run
    import orchestrator.config.preflight
    import orchestrator.control.wiring
    import providers.registry

    monkeypatch.chdir(cwd)
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(home))
    monkeypatch.setenv("HOME", str(user))
    for name in list(providers.registry.PROVIDERS):
        monkeypatch.setitem(providers.registry.PROVIDERS, name, _never(f"provider {name}"))
    monkeypatch.setattr(orchestrator.control.wiring, "build_controller", _never("the controller's wiring"))
    monkeypatch.setattr(
        orchestrator.config.preflight, "preflight", _never("preflight (a store was about to be written)")
    )
    monkeypatch.setattr(orchestrator.commands.plan, "main", _never("plan"))
    monkeypatch.setattr(orchestrator.commands.run, "supervise", _never("the supervisor"))


# Where a dangling link planted by ``plant`` points: nothing may ever be made there.
DANGLING = "made-through-the-link"


def plant(path: Path, shape: str, outside: Path) -> None:
    """Something other than a regular file at ``path``: a FIFO (``fifo``), a folder
    (``folder``), a link to ``outside`` (``link-out``), a dangling link into ``outside``'s
    folder (``dangling``, to DANGLING) or a link to itself (any other shape)."""
    if shape == "fifo":
        os.mkfifo(path)
    elif shape == "folder":
        path.mkdir()
    elif shape == "link-out":
        path.symlink_to(outside)
    elif shape == "dangling":
        path.symlink_to(outside.parent / DANGLING)
    else:
        path.symlink_to(path)
