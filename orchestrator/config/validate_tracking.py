"""The checks of tracking.*: a tracker's URL, names and tags, and no credential in any of them."""

from __future__ import annotations

from urllib.parse import urlsplit

from orchestrator.config.checks import at_least
from orchestrator.config.schema import Config, TrackerKind, TrackerMode, TrackingConfig
from orchestrator.errors import ConfigError
from recovery.storage import credential_name, find_secret

MAX_NAME = 250  # MLflow's limit on a run name, an experiment name and a tag's key
MAX_TAG_VALUE = 5000
MAX_TAGS = 100
# The orchestrator's own tags on the tracker run: a user's tags may not shadow them.
OWN_TAG_PREFIX = "orchestrator."


def validate_tracking(cfg: Config) -> None:
    t = cfg.tracking
    if t.kind is TrackerKind.none:
        return
    if t.uri is not None:
        _uri(t)
    for key, value in (
        ("tracking.project", t.project),
        ("tracking.entity", t.entity),
        ("tracking.run_name", t.run_name),
    ):
        if value is not None and not (0 < len(value) <= MAX_NAME and value.isprintable()):
            raise ConfigError(key, f"got {value!r}; expected 1 to {MAX_NAME} printable characters, or null")
    if t.entity is not None and t.kind is not TrackerKind.wandb:
        raise ConfigError("tracking.entity", "is W&B's alone: drop it, or use tracking=wandb")
    if t.mode is TrackerMode.offline and t.kind is not TrackerKind.wandb:
        raise ConfigError("tracking.mode", "offline is W&B's alone: drop it, or use tracking=wandb")
    _tags(t.tags)
    at_least("tracking.flush_every_s", t.flush_every_s, 0.1, "seconds")
    if t.flush_every_s > 600:
        raise ConfigError("tracking.flush_every_s", f"got {t.flush_every_s:g}; expected at most 600 (seconds)")


def _uri(t: TrackingConfig) -> None:
    if t.kind is not TrackerKind.mlflow:
        raise ConfigError(
            "tracking.uri", "is MLflow's alone (W&B reads WANDB_BASE_URL): drop it, or use tracking=mlflow"
        )
    parts = urlsplit(t.uri or "")
    if parts.scheme not in ("http", "https", "file") or (parts.scheme != "file" and not parts.hostname):
        raise ConfigError(
            "tracking.uri", f"got {t.uri!r}; expected an http:// or https:// tracking server, or file:///a/folder"
        )
    if find_secret({"uri": t.uri}) is not None or parts.query:
        raise ConfigError(
            "tracking.uri",
            "carries a credential (user information or a query); give the server alone, and the token in "
            "MLFLOW_TRACKING_TOKEN (or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)",
        )


def _tags(tags: dict[str, str]) -> None:
    if len(tags) > MAX_TAGS:
        raise ConfigError("tracking.tags", f"has {len(tags)} tags; at most {MAX_TAGS}")
    for name, value in tags.items():
        key = f"tracking.tags.{name}"
        if not (0 < len(name) <= MAX_NAME and name.isprintable()):
            raise ConfigError(key, f"expected a name of 1 to {MAX_NAME} printable characters")
        if name.startswith(OWN_TAG_PREFIX):
            raise ConfigError(key, f"{OWN_TAG_PREFIX}* are the orchestrator's own tags; pick another name")
        if credential_name(name) or find_secret({name: value}) is not None:
            raise ConfigError(key, "looks like a credential; a tag is shown to everyone who sees the run: drop it")
        if len(str(value)) > MAX_TAG_VALUE:
            raise ConfigError(key, f"is {len(str(value))} characters long; at most {MAX_TAG_VALUE}")
