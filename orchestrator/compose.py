"""Compose Hydra configs from command-line overrides into a typed, validated Config.

We call Hydra's compose API rather than ``@hydra.main``: a bad key must end in
one line and exit status 2, and a run must not change the working directory.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from orchestrator.config import (
    DISPLAY_KEYS,
    READ_ONLY_ACTIONS,
    Config,
    ConfigError,
    FaultConfig,
    RegionConfig,
    refuse_kept,
    show,
    validate,
)

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

_registered = False


def _register() -> None:
    global _registered
    if _registered:
        return
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    _registered = True


def compose(overrides: list[str], conf_dir: Path = CONF_DIR) -> Config:
    """Overrides (KEY=VALUE, GROUP=OPTION) to a validated Config, or ConfigError."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from orchestrator import compose_cache

    _register()
    refuse_unhonoured(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            raw = compose_cache.compose("config", _free_form(_absolute_home(overrides)))
        plain = OmegaConf.to_container(raw, resolve=True, throw_on_missing=True)
    except Exception as exc:
        raise _translate(exc, overrides) from None
    finally:
        GlobalHydra.instance().clear()
    assert isinstance(plain, dict)
    _settle_code(plain["job"], overrides)
    cfg = _typed(plain)
    refuse_kept(cfg.notify)
    return _validated(cfg)


def _validated(cfg: Config) -> Config:
    from providers.registry import check_regions

    validate(cfg)
    if cfg.action not in READ_ONLY_ACTIONS:
        check_regions(cfg)
    return cfg


# Hydra settings that mean something here: where to look for the user's config groups.
HONOURED_HYDRA = ("hydra.searchpath",)


def refuse_unhonoured(overrides: list[str]) -> None:
    """Options and Hydra settings this command does not act on are refused, not ignored:
    ``hydra.run.dir`` or ``--multirun`` would seem to work and do nothing (runs live
    under ``home``; we compose, Hydra runs nothing)."""
    for o in overrides:
        if o.startswith("-"):
            raise ConfigError(
                o.split("=", 1)[0],
                "not an option of python -m orchestrator; options are --config-dir DIR and --help, "
                "settings are KEY=VALUE",
            )
        key = o.partition("=")[0].lstrip("+~")
        if (key == "hydra" or key.startswith("hydra.")) and key not in HONOURED_HYDRA:
            raise ConfigError(
                key,
                "a Hydra setting this command does not honour (it composes the config and runs nothing "
                "through Hydra): runs and their logs live under home=<dir>; remove it",
            )


def _absolute_home(overrides: list[str]) -> list[str]:
    """``home=rel`` as an absolute path before Hydra puts it into the stores' URLs
    (``file://${home}/stores/...``), which must be absolute; the same for a relative
    ORCHESTRATOR_HOME. An empty home stays empty, for validate to refuse by name."""
    out = []
    given = False
    for o in overrides:
        key, sep, value = o.partition("=")
        if sep and key.lstrip("+~") == "home":
            given = True
            plain = value.strip("'\"")
            # An interpolation is Hydra's to resolve, and a quote or backslash would need its
            # escaping rules: those are left as given.
            if plain.strip() and not plain.startswith("/") and not {"'", "\\", "$"} & set(plain):
                o = f"{key}={_quoted(os.path.abspath(os.path.expanduser(plain)))}"
        out.append(o)
    env = os.environ.get("ORCHESTRATOR_HOME")
    if not given and env is not None and not env.startswith("/") and not {"'", "\\", "$"} & set(env):
        out.append(f"home={_quoted(os.path.abspath(os.path.expanduser(env)) if env.strip() else '')}")
    return out


def _quoted(text: str) -> str:
    return f"'{text}'"


# Mappings whose keys are the user's to choose: job.params.hidden=64 adds the key (Hydra's
# struct mode would want '+') or replaces it.
FREE_FORM = ("job.params.",)


def _free_form(overrides: list[str]) -> list[str]:
    return [f"++{o}" if o.startswith(FREE_FORM) and "=" in o else o for o in overrides]


def _settle_code(job: dict[str, Any], overrides: list[str]) -> None:
    """What trains, as the command line says: ``job.train_func=m:f`` over the default job
    replaces its workload (and the other way round); both on one command line stay both,
    and validate refuses them. A run named after the default job is named after the code."""
    given = {o.partition("=")[0].lstrip("+~") for o in overrides if "=" in o}
    if "job.train_func" in given and "job.workload" not in given:
        job["workload"] = ""
    if "job.workload" in given and "job.train_func" not in given:
        job["train_func"] = ""
    code = job["train_func"] if "job.train_func" in given else job["workload"] if "job.workload" in given else None
    if code and not {"job", "job.name"} & given:
        name = str(code).rpartition(":")[2].rpartition(".")[2].lower()
        safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "-" for c in name)[:60].strip("-_")
        job["name"] = safe or job["name"]


def _typed(plain: dict[str, Any]) -> Config:
    """A plain mapping of the config's keys as a Config: OmegaConf, merging it into the schema,
    converts each value to its field's type and refuses a wrong type, a value outside a
    closed set and an unknown key (ConfigError naming it)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from orchestrator.compose_cache import schema

    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(schema(Config), plain))
    except OmegaConfBaseException as exc:
        chaos = plain.get("chaos")
        raise _refusal(exc, plain, chaos.get("faults") if isinstance(chaos, dict) else None) from None
    assert isinstance(cfg, Config)
    for region in cfg.cloud.regions.values():
        region.store = _normalize_store(region.store)
    if cfg.cloud.control_store is not None:
        cfg.cloud.control_store = _normalize_store(cfg.cloud.control_store)
    cfg.home = _normalize_home(cfg.home)
    return cfg


# Top-level sections a run's config.json from before them lacks: it reads with their defaults.
ADDED_SINCE = ("notify", "metrics")


def config_from_plain(d: Any) -> Config:
    """A config saved with ``to_plain`` (a run's config.json), typed and validated again:
    a damaged or edited file is a ConfigError naming the key, like a bad command line."""
    from dataclasses import fields

    if not isinstance(d, dict):
        raise ConfigError("config", f"got {type(d).__name__}; expected a mapping of the config's keys")
    # to_plain wrote every key: one missing is damage, not a default to fill in, except
    # a section added since, which a run from before it lacks.
    for f in fields(Config):
        if f.name not in d and f.name not in DISPLAY_KEYS and f.name not in ADDED_SINCE:
            raise ConfigError(f.name, "is missing")
    return _validated(_typed(d))


def _normalize_store(url: str) -> str:
    # A file:// store under "~" must name one place, whoever resolves it later. A
    # relative one stays as it is, for validate to refuse (relative to what?).
    if isinstance(url, str) and url.startswith(("file:///", "file://~")):
        return "file://" + os.path.abspath(os.path.expanduser(url[len("file://") :]))
    return url


def _normalize_home(home: Any) -> Any:
    # Empty stays empty: made absolute it would be the working directory, and validate refuses it.
    if isinstance(home, str) and home.strip() and "\x00" not in home:
        return os.path.abspath(os.path.expanduser(home))
    return home


def _translate(exc: BaseException, overrides: list[str]) -> ConfigError:
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
            return _unparsable(overrides, e)
    for e in chain:
        if isinstance(e, OmegaConfBaseException) and getattr(e, "full_key", None):
            parts = str(e.full_key).split(".")
            # Hydra refuses a key under cloud.regions that names no region of the cloud.
            if isinstance(e, (ConfigAttributeError, ConfigKeyError)) and parts[:2] == ["cloud", "regions"]:
                if len(parts) >= 3:
                    return ConfigError(".".join(parts[:3]), _unknown_region_message(parts[2], overrides))
            return _refusal(e, None, _faults_given(overrides))
    return ConfigError("config", _first_line(exc))


def _refusal(exc: BaseException, plain: dict[str, Any] | None, faults: Any) -> ConfigError:
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

    from orchestrator.config import RandomTrigger

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


def _unparsable(overrides: list[str], exc: BaseException) -> ConfigError:
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


def _unknown_region_message(region: str, overrides: list[str]) -> str:
    from omegaconf import OmegaConf

    cloud = _given_for("cloud", overrides) or "local"
    try:
        known = list(OmegaConf.load(CONF_DIR / "cloud" / f"{cloud}.yaml")["regions"])
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
