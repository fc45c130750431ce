"""Overrides Hydra takes and that would change nothing, or change the run silently: a
config group picked twice (the last wins: ``cloud=local cloud=aws`` is aws), an empty
mapping (Hydra merges it, so ``job={}`` keeps the job), and a key deleted (``~action``
falls back to its default, a run). Each is refused before Hydra composes, naming the key.
"""

from __future__ import annotations

import typing
from dataclasses import fields, is_dataclass
from typing import Any

from orchestrator.config.schema import Config
from orchestrator.errors import ConfigError

# What a dotted key names in the schema.
SECTION = "section"  # a dataclass: job, cloud, cloud.regions.<name>
REGIONS = "regions"  # cloud.regions: the cloud's regions by name
REGION = "region"  # cloud.regions.<name>: one region (deleting it leaves the run without it)
FREE = "free"  # a mapping of the user's keys (job.params, storage_options...), or a key in one
NULLABLE = "nullable"  # a field whose default is null: deleting it sets null
FIELD = "field"  # any other field: deleting it puts its default back, unsaid


def refuse_no_ops(overrides: list[str], groups: list[str]) -> None:
    """ConfigError for a group picked twice, an empty mapping given, or a key deleted that
    the run cannot go without. ``groups``: the primary config's groups."""
    picked: dict[str, str] = {}
    for o in overrides:
        raw_key, sep, value = o.partition("=")
        key = raw_key.lstrip("+~")
        if sep and key in groups and not raw_key.startswith("~"):
            if key in picked:
                raise ConfigError(
                    key, f"is given twice ({key}={picked[key]}, {o}); Hydra would take the last: give one option"
                )
            picked[key] = value
        kind = schema_kind(key)
        if sep and value.replace(" ", "") == "{}" and kind in (SECTION, REGIONS, REGION, FREE):
            raise ConfigError(
                key, f"{{}} changes nothing (Hydra merges a mapping into the key's); set its keys: {key}.<name>=VALUE"
            )
        if raw_key.startswith("~") and kind in (SECTION, REGIONS, FIELD):
            raise ConfigError(
                key,
                f"~{key} deletes a key the run needs, which would fall back to its default unsaid; "
                f"set it instead: {key}=VALUE",
            )


def schema_kind(dotted: str) -> str | None:
    """What ``dotted`` names in Config (SECTION, REGIONS, REGION, FREE, NULLABLE, FIELD); None
    for a key the schema does not know (Hydra refuses it, naming it) or a group path."""
    if not dotted or "/" in dotted or dotted.startswith("hydra"):
        return None
    node: Any = Config
    kind: str | None = SECTION
    for part in dotted.split("."):
        if kind == FREE:
            return FREE
        if kind == REGIONS:
            node, kind = _region_type(), REGION
            continue
        if not is_dataclass(node):
            return None
        match = {f.name: f for f in fields(node)}.get(part)
        if match is None:
            return None
        hint = typing.get_type_hints(node)[part]
        node, kind = _kind(hint, match)
    return kind


def _region_type() -> type:
    from orchestrator.config.schema import RegionConfig

    return RegionConfig


def _kind(hint: Any, f: Any) -> tuple[Any, str]:
    origin = typing.get_origin(hint)
    if is_dataclass(hint):
        return hint, SECTION
    if origin is dict:
        value = typing.get_args(hint)[1]
        return (value, REGIONS) if is_dataclass(value) else (None, FREE)
    return None, NULLABLE if f.default is None else FIELD
