"""Compositions reused within a test session: a unit test that composes a command line
another test composed already gets a deep copy of that Config (Hydra's composition and
the typed merge cost a tenth of a second or more each; the unit tier composes hundreds).

Only what cannot have changed since is reused: the repository's conf/ (no user config
folder, no search path), no value that names a file or folder (a test makes and edits
those), the same working directory, environment and import path; a composition that
failed is composed again each time. The unit tier's conftest installs it."""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Words in an override that may lead outside conf/ or to the file system.
_NOT_REUSED = ("/", "~", "searchpath", "config_dir", "code_dir", "file:")

_kept: dict[tuple[Any, ...], Any] = {}


def reusable(overrides: list[str], conf_dir: Path, conf: Path) -> bool:
    return Path(conf_dir) == conf and not any(w in o for o in overrides for w in _NOT_REUSED)


def memoized(compose_full: Callable[..., Any], conf: Path) -> Callable[..., Any]:
    """``compose_full`` that keeps each reusable composition and hands out deep copies
    (a test may change the Config it gets)."""

    def compose_full_kept(overrides: list[str], conf_dir: Path = conf) -> Any:
        if not reusable(overrides, conf_dir, conf):
            return compose_full(overrides, conf_dir)
        key = (tuple(overrides), os.getcwd(), tuple(sorted(os.environ.items())), tuple(sys.path))
        if key not in _kept:
            _kept[key] = compose_full(overrides, conf_dir)
        return copy.deepcopy(_kept[key])

    return compose_full_kept
