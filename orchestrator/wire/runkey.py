"""How the run's key (recovery/signing.py) reaches the processes that sign and check manifests.

- controller -> driver: the provider starts the driver with ``ORCHESTRATOR_RUN_KEY``
  (hex) in its process environment: the local provider as a Popen env, SkyPilot as a
  line on the ssh session's stdin, exported by the remote shell (never on a command
  line, in a task's envs, or in a file). The runtime spec never carries it: it is a
  file, and Ray Train exports its train_loop_config to its state API.
- driver -> Ray Train workers: the driver takes the variable out of its environment
  (its children do not inherit it), puts the key in Ray's object store once and hands
  the workers the ObjectRef in train_loop_config; a worker resolves it with ray.get.
  The object is small, so it stays in the driver's memory, never spilled to disk.

Nothing here logs or echoes the key; errors name the variable, never its value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

ENV = "ORCHESTRATOR_RUN_KEY"
CONFIG_KEY = "run_key_ref"

_installed: list[bytes] = []


class RunKeyError(RuntimeError):
    """The runtime has no usable run key: its checkpoints could not be signed or trusted."""


def to_env(key: bytes) -> dict[str, str]:
    return {ENV: key.hex()}


def parse(text: str) -> bytes:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        raise RunKeyError(f"{ENV} is not hex") from None
    if len(key) < 16:
        raise RunKeyError(f"{ENV} is too short ({len(key)} bytes)")
    return key


def take_from_env(environ: Any = None) -> bytes | None:
    """The key from the environment, removed from it: processes this one starts
    (Ray's, a user's) must not inherit it. None when it is not set."""
    env = os.environ if environ is None else environ
    text = env.pop(ENV, None)
    return None if text is None else parse(text)


def install(key: bytes) -> None:
    """This process's key from now on (the driver after ``take_from_env``, a worker after ``from_config``)."""
    _installed[:] = [key]


def current() -> bytes | None:
    """This process's key: installed, or else still in the environment (taken then)."""
    if not _installed:
        key = take_from_env()
        if key is not None:
            install(key)
    return _installed[0] if _installed else None


def require() -> bytes:
    key = current()
    if key is None:
        raise RunKeyError(f"{ENV} is not set: the controller gives it to every attempt; checkpoints need it")
    return key


def share(key: bytes) -> dict[str, Any]:
    """The driver's entry for train_loop_config: an ObjectRef to the key, never the key."""
    import ray

    return {CONFIG_KEY: ray.put(key)}


def from_config(config: Mapping[str, Any]) -> None:
    """A Ray Train worker: install the key the driver shared, if it shared one."""
    ref = config.get(CONFIG_KEY)
    if ref is None:
        return
    import ray

    key = ray.get(ref)
    if isinstance(key, bytes):
        install(key)
