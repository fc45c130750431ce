"""How an attempt's keys (recovery/keys.py) reach the processes that sign and check manifests.

An attempt gets ``AttemptKeys``: its generation's key (from which it derives earlier
generations' keys, never a later one's) and the public key that checks the
controller's fences; never the run's secret, never the fence signing key.

- controller -> driver: the provider starts the driver with ``ORCHESTRATOR_RUN_KEY``
  (``AttemptKeys.to_wire``, hex) in its process environment: the local provider as a Popen env, SkyPilot as a
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

from recovery.keys import AttemptKeys, KeysError

ENV = "ORCHESTRATOR_RUN_KEY"
CONFIG_KEY = "run_key_ref"

_installed: list[AttemptKeys] = []


class RunKeyError(RuntimeError):
    """The runtime has no usable run key: its checkpoints could not be signed or trusted."""


def to_env(keys: AttemptKeys) -> dict[str, str]:
    return {ENV: keys.to_wire()}


def parse(text: str) -> AttemptKeys:
    try:
        return AttemptKeys.from_wire(text)
    except KeysError as exc:
        raise RunKeyError(f"{ENV} is not an attempt's keys: {exc}") from None


def take_from_env(environ: Any = None) -> AttemptKeys | None:
    """The keys from the environment, removed from it: processes this one starts
    (Ray's, a user's) must not inherit them. None when it is not set."""
    env = os.environ if environ is None else environ
    text = env.pop(ENV, None)
    return None if text is None else parse(text)


def install(keys: AttemptKeys) -> None:
    """This process's keys from now on (the driver after ``take_from_env``, a worker after ``from_config``)."""
    _installed[:] = [keys]


def current() -> AttemptKeys | None:
    """This process's keys: installed, or else still in the environment (taken then)."""
    if not _installed:
        keys = take_from_env()
        if keys is not None:
            install(keys)
    return _installed[0] if _installed else None


def require() -> AttemptKeys:
    keys = current()
    if keys is None:
        raise RunKeyError(f"{ENV} is not set: the controller gives it to every attempt; checkpoints need it")
    return keys


def share(keys: AttemptKeys) -> dict[str, Any]:
    """The driver's entry for train_loop_config: an ObjectRef to the keys, never the keys."""
    import ray

    return {CONFIG_KEY: ray.put(keys.to_wire())}


def from_config(config: Mapping[str, Any]) -> None:
    """A Ray Train worker: install the keys the driver shared, if it shared them."""
    ref = config.get(CONFIG_KEY)
    if ref is None:
        return
    import ray

    text = ray.get(ref)
    if isinstance(text, str):
        install(parse(text))
