"""A run's saved config (``<home>/runs/<run_id>/config.json``), both ways: what is written
for action=resume, and the typed, validated config read back from it."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.config.compose import typed_config
from orchestrator.config.schema import DISPLAY_KEYS, Config, NotifyConfig
from orchestrator.config.validate import validate
from orchestrator.errors import ConfigError
from orchestrator.wire.codec import to_plain

# Top-level sections a run's config.json from before them lacks: it reads with their defaults.
ADDED_SINCE = ("notify", "metrics", "tracking")


def refuse_credentials(cfg: Config, name: str) -> None:
    """Credentials are refused in configs (validate), and once more here, before a config
    would reach the disk as ``name``: the stores' URLs and options, the control store's."""
    from recovery.storage import refuse_secret

    refuse_secret(
        name,
        {
            "regions": {
                region_name: {"store": region.store, "storage_options": region.storage_options}
                for region_name, region in cfg.cloud.regions.items()
            },
            "control_store": cfg.cloud.control_store,
            "control_options": cfg.cloud.control_options,
        },
    )


def saved_json(cfg: Config, notify: NotifyConfig) -> bytes:
    """config.json's bytes: ``cfg`` with ``notify`` (its targets as the run's notify.secret
    keeps them: named by what may be shown of each, orchestrator/notify/secret.py)."""
    plain = {**to_plain(cfg), "notify": to_plain(notify)}
    return json.dumps(plain, indent=1).encode()


def config_from_plain(d: Any) -> Config:
    """A config saved by ``saved_json`` (a run's config.json), typed and validated again:
    a damaged or edited file is a ConfigError naming the key, like a bad command line."""
    from dataclasses import fields

    if not isinstance(d, dict):
        raise ConfigError("config", f"got {type(d).__name__}; expected a mapping of the config's keys")
    # to_plain wrote every key: one missing is damage, not a default to fill in, except
    # a section added since, which a run from before it lacks.
    for f in fields(Config):
        if f.name not in d and f.name not in DISPLAY_KEYS and f.name not in ADDED_SINCE:
            raise ConfigError(f.name, "is missing")
    return validate(typed_config(d))
