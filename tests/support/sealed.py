"""What an attempt writes on a run's control channel, sealed with its keys as the runtime
seals it: for tests that stand in for a live attempt beside a real run folder."""

from __future__ import annotations

import os
from typing import Any

from orchestrator.wire.control import ControlChannel, run_control_url
from recovery.signing import load_or_create_secret, run_keys_of


def attempt_channel(run_dir: str | os.PathLike[str], gen: int = 1) -> ControlChannel:
    """Attempt ``gen``'s side of the run's local control channel (the run's secret made if it has none)."""
    folder = os.fspath(run_dir)
    load_or_create_secret(folder)
    keys = run_keys_of(folder).for_attempt(gen)
    return ControlChannel(run_control_url(None, os.path.basename(os.path.normpath(folder)), folder), keys=keys)


def sealed_progress(run_dir: str | os.PathLike[str], gen: int = 1, **fields: Any) -> None:
    attempt_channel(run_dir, gen).progress(gen, **fields)
