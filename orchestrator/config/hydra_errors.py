"""Hydra's refusals, worded as one ConfigError that names the key: the Hydra settings this
command does not honour, a sweep's value outside -m, and Hydra's and OmegaConf's own errors
(an unknown key or region, a value of the wrong type, an override that does not parse).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from orchestrator.config.schema import Config, FaultConfig, RegionConfig
from orchestrator.errors import ConfigError
from orchestrator.wire.codec import show

# Hydra settings that mean something here: where to look for the user's config groups.
HONOURED_HYDRA = ("hydra.searchpath",)
# Why the others are refused (by the longest prefix): each would seem to work and do
# nothing, since Hydra composes the config here and runs nothing.
_RUN_FILES = (
    "a run keeps its files under <home>/runs/<run_id> (Hydra makes no output folder here, and the working "
    "directory is never changed); set home=<dir>"
)
_LOGS = "Hydra logs nothing here: a run's events are in <home>/runs/<run_id>/journal.jsonl"
_LAUNCHER = "a sweep (-m) runs its runs one after another on this machine, with no launcher plugin"
_SWEEPER = "a sweep (-m) takes its values from the command line (KEY=a,b, range(), choice()), with no sweeper plugin"
HYDRA_REFUSALS: dict[str, str] = {
    "hydra.run": _RUN_FILES,
    "hydra.sweep": "each run of a sweep keeps its files under <home>/runs/<run_id>, as any run; set home=<dir>",
    "hydra.output_subdir": "a run's config is <home>/runs/<run_id>/config.json; Hydra writes no .hydra folder here",
    "hydra.job.chdir": "the working directory is never changed; a run keeps its files under <home>/runs/<run_id>",
    "hydra.mode": "run a sweep with -m (--multirun)",
    "hydra.launcher": _LAUNCHER,
    "hydra/launcher": _LAUNCHER,
    "hydra.sweeper": _SWEEPER,
    "hydra/sweeper": _SWEEPER,
    "hydra.verbose": _LOGS,
    "hydra.job_logging": _LOGS,
    "hydra/job_logging": _LOGS,
    "hydra.hydra_logging": _LOGS,
    "hydra/hydra_logging": _LOGS,
}
_HYDRA_OTHER = "this command composes the config with Hydra and runs nothing through it; remove it"


def hydra_refusal(key: str) -> str | None:
    """Why the Hydra setting ``key`` (``hydra.x.y`` or the group ``hydra/x``) is refused;
    None for a key that is no Hydra setting, or one honoured here."""
    if key in HONOURED_HYDRA or not (key == "hydra" or key.startswith(("hydra.", "hydra/"))):
        return None
    for prefix in sorted(HYDRA_REFUSALS, key=len, reverse=True):
        if key == prefix or key.startswith((prefix + ".", prefix + "/")):
            return f"a Hydra setting this command does not honour: {HYDRA_REFUSALS[prefix]}"
    return f"a Hydra setting this command does not honour: {_HYDRA_OTHER}"


def refuse_unhonoured(overrides: list[str]) -> None:
    """Options and Hydra settings this command does not act on are refused, not ignored:
    ``hydra.run.dir`` would seem to work and do nothing (runs live under ``home``; we
    compose, Hydra runs nothing). Options are taken off the command line before
    (orchestrator.config.cli); one left here is none of them."""
    from orchestrator.config.cli import OPTIONS_LINE

    for o in overrides:
        if o.startswith("-"):
            raise ConfigError(o.split("=", 1)[0], f"not an option of python -m orchestrator; {OPTIONS_LINE}")
        key = o.partition("=")[0].lstrip("+~")
        why = hydra_refusal(key)
        if why is not None:
            raise ConfigError(key, why)


def refuse_sweeps(overrides: list[str]) -> None:
    """A sweep's value (``a,b``, ``range()``, ``choice()``...) outside ``-m``: Hydra's own
    refusal ("Ambiguous value") names no way out."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for o in overrides:
        try:
            (parsed,) = parser.parse_overrides([o])
        except OverrideParseException:
            continue  # Hydra's compose refuses it, naming the key
        if parsed.is_sweep_override():
            key = parsed.get_key_element().lstrip("+~")
            value = o.partition("=")[2]
            raise ConfigError(
                key,
                f"{show(value)} is a sweep; add -m to run one run per value, or quote it for one string "
                f"({key}='{value}'), or bracket it for a list ({key}=[{value}])",
            )


def region_key(key: str) -> bool:
    parts = key.lstrip("+~").split(".")
    return len(parts) >= 4 and parts[:2] == ["cloud", "regions"] and all(parts)


def translate(exc: BaseException, overrides: list[str], conf_dir: Path) -> ConfigError:
    """Hydra's or OmegaConf's error while composing, as one ConfigError naming the key."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    chain = _chain(exc)
    for e in chain:
        if isinstance(e, MissingConfigException):
            group = _group_of(str(e))
            options = list(getattr(e, "options", None) or [])
            given = _given_for(group, overrides) if group else None
            allowed = ", ".join(options) if options else "see conf/" + (group or "")
            return ConfigError(
                group or "config",
                f"got {given!r}; allowed: {allowed}" if given else f"{_first_line(e)}",
            )
        if isinstance(e, OverrideParseException):
            return unparsable(overrides, e)
        region = _unknown_region_merged(e, chain)
        if region is not None:
            return ConfigError(f"cloud.regions.{region}", _unknown_region_message(region, overrides, conf_dir))
    for e in chain:
        if isinstance(e, OmegaConfBaseException) and getattr(e, "full_key", None):
            parts = str(e.full_key).split(".")
            # Hydra refuses a key under cloud.regions that names no region of the cloud.
            if isinstance(e, (ConfigAttributeError, ConfigKeyError)) and parts[:2] == ["cloud", "regions"]:
                if len(parts) >= 3:
                    return ConfigError(".".join(parts[:3]), _unknown_region_message(parts[2], overrides, conf_dir))
            return refusal(e, None, _faults_given(overrides))
    return ConfigError("config", _first_line(exc))


def _unknown_region_merged(e: BaseException, chain: list[BaseException]) -> str | None:
    """The region an override under cloud.regions.<name> names when Hydra could not merge it
    because the cloud has no such region (OmegaConf then names the region alone)."""
    from hydra.errors import ConfigCompositionException

    marker = "Error merging override "
    if not isinstance(e, ConfigCompositionException) or not str(e).startswith(marker):
        return None
    key = str(e)[len(marker) :].partition("=")[0]
    if not region_key(key):
        return None
    region = key.lstrip("+~").split(".")[2]
    if any(getattr(x, "full_key", None) == region for x in chain):
        return region
    return None


def refusal(exc: BaseException, plain: dict[str, Any] | None, faults: Any) -> ConfigError:
    """OmegaConf's refusal of a value or key, as one line naming the full key: the value
    given and the type or the closed set's values expected."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, ValidationError

    key = _full_key(exc, plain, faults)
    if isinstance(exc, (ConfigAttributeError, ConfigKeyError)) and " not in " in str(exc):
        return ConfigError(key, _unknown_key_message(key))
    if isinstance(exc, MissingMandatoryValue):
        return ConfigError(key, "is required but has no value; set it with " + key + "=...")
    if isinstance(exc, ValidationError):
        value = getattr(exc, "value", None)
        if value is None and plain is not None and key in plain:
            value = plain[key]  # OmegaConf keeps no value for a section that is no mapping
        allowed = _allowed(exc)
        if allowed is not None:
            return ConfigError(key, f"got {show(value)}; allowed: {', '.join(allowed)}")
        return ConfigError(key, f"got {show(value)}; expected {_expected_type(str(exc))}")
    return ConfigError(key, _first_line(exc))


def _full_key(exc: BaseException, plain: dict[str, Any] | None, faults: Any) -> str:
    """The key from the config's root. OmegaConf names a key inside a list element relative
    to the element (the index is found by typing the given faults one at a time), and a
    section that is no mapping by no key at all."""
    import typing
    from dataclasses import fields, is_dataclass

    from orchestrator.config.schema import RandomTrigger

    key = str(getattr(exc, "full_key", "") or "")
    schema = getattr(exc, "object_type", None)
    if schema in (FaultConfig, RandomTrigger) and not key.startswith("chaos."):
        where = "chaos.faults[]"
        for i, item in enumerate(faults if isinstance(faults, list) else []):
            if _refused(FaultConfig, item):
                where = f"chaos.faults[{i}]"
                break
        inner = f"random.{key}" if schema is RandomTrigger and not key.startswith("random") else key
        return f"{where}.{inner}" if inner else where
    if not key and schema is Config and isinstance(plain, dict):
        hints = typing.get_type_hints(Config)
        for f in fields(Config):
            if is_dataclass(hints[f.name]) and f.name in plain and not isinstance(plain[f.name], dict):
                return f.name
    return key or "config"


def _refused(schema: type, item: Any) -> bool:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), item))
    except OmegaConfBaseException:
        return True
    return False


def _faults_given(overrides: list[str]) -> Any:
    """The faults a chaos.faults=[...] override gives, as Hydra parses them (None: none given)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for o in overrides:
        if o.partition("=")[0].lstrip("+~") == "chaos.faults":
            try:
                return OverridesParser.create().parse_overrides([o])[0].value()
            except Exception:
                return None
    return None


def _allowed(exc: BaseException) -> list[str] | None:
    """A closed set's values, when the refused key is typed by one (an enum)."""
    import types
    import typing
    from dataclasses import is_dataclass
    from enum import Enum

    schema = getattr(exc, "object_type", None)
    leaf = str(getattr(exc, "key", None) or str(getattr(exc, "full_key", "")).rpartition(".")[2])
    if not is_dataclass(schema):
        return None
    hint = typing.get_type_hints(schema).get(leaf)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next((a for a in typing.get_args(hint) if a is not type(None)), None)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return [str(m.value) for m in hint]
    return None


def unparsable(overrides: list[str], exc: BaseException) -> ConfigError:
    """The override Hydra could not parse, named by its key."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for o in overrides:
        try:
            parser.parse_overrides([o])
        except OverrideParseException:
            key, sep, _ = o.partition("=")
            if not sep:
                return ConfigError(show(o)[1:-1], "expected KEY=VALUE or GROUP=OPTION, e.g. job=digits")
            return ConfigError(
                show(key.lstrip("+~"))[1:-1],
                f"cannot parse {show(o)} ({_first_line(exc)}); quote a value that holds spaces, brackets or braces: "
                "key='value'",
            )
    return ConfigError("command line", f"cannot parse an override: {_first_line(exc)}")


def _unknown_region_message(region: str, overrides: list[str], conf_dir: Path) -> str:
    from omegaconf import OmegaConf

    cloud = _given_for("cloud", overrides) or "local"
    try:
        known = list(OmegaConf.load(conf_dir / "cloud" / f"{cloud}.yaml")["regions"])
    except Exception:
        known = []
    return (
        f"{region!r} is not a region of cloud {cloud!r}; regions: {', '.join(known)} "
        f"(to add one, give its store: +cloud.regions.{region}.store=URL)"
    )


def _unknown_key_message(key: str) -> str:
    parent, _, leaf = key.rpartition(".")
    allowed = _keys_under(parent)
    hint = ""
    close = difflib.get_close_matches(leaf, allowed, n=1)
    if close:
        hint = f" (did you mean {(parent + '.' if parent else '') + close[0]!r}?)"
    where = f"under {parent!r}" if parent else "at the top level"
    return f"unknown key{hint}; allowed {where}: {', '.join(allowed)}"


def _keys_under(dotted: str) -> list[str]:
    from dataclasses import fields, is_dataclass

    node: Any = Config
    for part in [p for p in dotted.split(".") if p]:
        if "[" in part:
            part = part.split("[")[0]
        match = {f.name: f for f in fields(node)}.get(part) if is_dataclass(node) else None
        if match is None:
            continue  # a region's name inside cloud.regions
        node = _field_type(node, part)
    return [f.name for f in fields(node)] if is_dataclass(node) else []


def _field_type(cls: type, name: str) -> Any:
    import typing

    hints = typing.get_type_hints(cls)
    t = hints[name]
    origin = typing.get_origin(t)
    if origin in (dict, list):
        return {"regions": RegionConfig, "faults": FaultConfig}.get(name, t)
    return t


def _expected_type(message: str) -> str:
    lowered = message.lower()
    for word, text in (
        ("integer", "an integer"),
        ("float", "a number"),
        ("bool", "true or false"),
        ("str", "a string"),
    ):
        if f"to {word}" in lowered or f"type {word}" in lowered or f"type '{word}'" in lowered:
            return text
    if "is not optional" in lowered:
        return "a value (the key cannot be null)"
    # A section, a region or a fault given as something else than a mapping of its keys.
    if "subclass of" in lowered or "to dict[" in lowered:
        return "a mapping of its keys"
    if "listconfig" in lowered or "to list[" in lowered:
        return "a list"
    return _first_line_text(message)


def _group_of(message: str) -> str | None:
    # Hydra says: "In 'config': Could not find 'cloud/foo'".
    marker = "Could not find '"
    if marker in message:
        path = message.split(marker, 1)[1].split("'", 1)[0]
        return path.split("/")[0] if "/" in path else None
    return None


def _given_for(group: str, overrides: list[str]) -> str | None:
    for o in overrides:
        k, _, v = o.partition("=")
        if k.lstrip("+~") == group:
            return v
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in out:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _first_line(exc: BaseException) -> str:
    return _first_line_text(str(exc))


def _first_line_text(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return text.strip()
