"""Compose Hydra configs from command-line overrides into a typed, validated Config.

We call Hydra's compose API rather than ``@hydra.main``: a bad key must end in
one line and exit status 2, and a run must not change the working directory.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from orchestrator.config.notify_targets import refuse_kept
from orchestrator.config.schema import DISPLAY_KEYS, Config, FaultConfig, RegionConfig
from orchestrator.config.validate import validate
from orchestrator.errors import ConfigError
from orchestrator.wire.codec import show

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

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
    return compose_full(overrides, conf_dir).config


@dataclass(frozen=True)
class Composed:
    """A composed config with what Hydra chose on the way: each config group's option
    (``hydra.runtime.choices``, Hydra's own groups left out) and the config search path
    (``file://`` folders and ``structured://``), in the order searched."""

    config: Config
    choices: dict[str, str]
    searchpath: list[str]


def compose_full(overrides: list[str], conf_dir: Path = CONF_DIR) -> Composed:
    """compose(), with what Hydra chose on the way (--cfg and --info show it)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf, open_dict

    from orchestrator.config import compose_cache

    _register()
    refuse_unhonoured(overrides)
    refuse_sweeps(overrides)
    given, additions = split_region_additions(_free_form(_absolute_home(overrides)))
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            raw = compose_cache.compose("config", given, keep_hydra=True)
        runtime = raw.hydra.runtime
        order = [g for g, _ in primary_defaults(conf_dir)]
        picked = {str(g): str(o) for g, o in runtime.choices.items() if not str(g).startswith("hydra/")}
        choices = {g: picked[g] for g in sorted(picked, key=lambda g: order.index(g) if g in order else len(order))}
        searchpath = [f"{s.schema}://{s.path}" for s in runtime.config_sources if s.provider != "hydra"]
        with open_dict(raw):
            del raw["hydra"]
        _add_regions(raw, additions)
        plain = OmegaConf.to_container(raw, resolve=True, throw_on_missing=True)
    except ConfigError:
        raise
    except Exception as exc:
        raise _translate(exc, overrides) from None
    finally:
        GlobalHydra.instance().clear()
    assert isinstance(plain, dict)
    _settle_code(plain["job"], overrides)
    cfg = _typed(plain)
    refuse_kept(cfg.notify)
    return Composed(_validated(cfg), choices, searchpath)


def primary_defaults(conf_dir: Path = CONF_DIR) -> list[tuple[str, str | None]]:
    """conf/config.yaml's defaults list, in order: (group, its default option) for a
    config group, (name, None) for a config (the schema base_config, _self_)."""
    from omegaconf import OmegaConf

    out: list[tuple[str, str | None]] = []
    for entry in OmegaConf.to_container(OmegaConf.load(conf_dir / "config.yaml"))["defaults"]:  # type: ignore[index]
        if isinstance(entry, dict):
            ((group, option),) = entry.items()
            out.append((str(group), str(option)))
        else:
            out.append((str(entry), None))
    return out


def config_groups(dirs: list[Path]) -> dict[str, list[str]]:
    """Each config group found in ``dirs`` (searched in order, as Hydra searches them) and
    its options: GROUP/OPTION.yaml. The primary config's groups come first, in its order."""
    found: dict[str, set[str]] = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for group in sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
            options = {f.stem for f in group.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file()}
            if options:
                found.setdefault(group.name, set()).update(options)
    order = [g for g, option in primary_defaults() if option is not None]
    ranked = sorted(found, key=lambda g: (order.index(g) if g in order else len(order), g))
    return {g: sorted(found[g]) for g in ranked}


def searched_dirs(searchpath: list[str]) -> list[Path]:
    """The folders of a config search path (its ``file://`` entries)."""
    return [Path(s[len("file://") :]) for s in searchpath if s.startswith("file://")]


def _validated(cfg: Config) -> Config:
    """The config's own checks; a provider's checks of its regions are the command's
    (orchestrator.commands.run.check_regions), as this layer knows no provider."""
    return validate(cfg)


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


# cloud.regions.<name>.<field>: with '+', a region the cloud has not (Hydra's '+' adds a key,
# and every region has each of these already). A free-form mapping's key ('+' adds one to
# storage_options) says nothing of the region.
_REGION_FIELDS = frozenset(f.name for f in fields(RegionConfig) if f.name != "storage_options")


def split_region_additions(overrides: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The overrides Hydra composes, and those of each region the command line adds: every
    override of ``cloud.regions.<name>.*`` for a name one of them adds with
    ``+cloud.regions.<name>.<field>=...``. Hydra cannot add a key to a mapping of typed
    regions; ``_add_regions`` does, after composing."""
    added: set[str] = set()
    for o in overrides:
        key = o.partition("=")[0]
        parts = key.split(".")
        if key.startswith("+") and not key.startswith("++") and _region_key(key) and parts[3] in _REGION_FIELDS:
            added.add(parts[2])
    given: list[str] = []
    additions: dict[str, list[str]] = {}
    for o in overrides:
        key = o.partition("=")[0]
        region = key.lstrip("+~").split(".")[2] if _region_key(key) else None
        if region in added and not key.startswith("~"):
            additions.setdefault(region, []).append(o)
        else:
            given.append(o)
    return given, additions


def _region_key(key: str) -> bool:
    parts = key.lstrip("+~").split(".")
    return len(parts) >= 4 and parts[:2] == ["cloud", "regions"] and all(parts)


def _add_regions(raw: Any, additions: dict[str, list[str]]) -> None:
    """Each added region into the composed config: the fields given, the others at
    RegionConfig's defaults (a provider's own checks name a field it cannot do without,
    such as a SkyPilot region's infra)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    from orchestrator.config.compose_cache import schema

    parser = OverridesParser.create()
    regions = raw.cloud.regions
    for name, given in additions.items():
        if name in regions:
            key = next(o.partition("=")[0] for o in given if o.startswith("+")).lstrip("+")
            raise ConfigError(
                key,
                f"{name!r} is a region of cloud {raw.cloud.name} already; set its keys without '+': {key}=...",
            )
        node: dict[str, Any] = {}
        for o in given:
            parsed = parser.parse_overrides([o])[0]
            *path, leaf = parsed.key_or_group.split(".")[3:]
            at = node
            for part in path:
                at = at.setdefault(part, {})
                if not isinstance(at, dict):
                    raise ConfigError(parsed.key_or_group, "sets a key inside a value that is no mapping")
            at[leaf] = parsed.value()
        if "store" not in node:
            raise ConfigError(
                f"cloud.regions.{name}.store",
                f"{name!r} is not a region of cloud {raw.cloud.name}; a region added needs its store: "
                f"+cloud.regions.{name}.store=URL",
            )
        try:
            typed = OmegaConf.merge(schema(RegionConfig), node)
        except OmegaConfBaseException as exc:
            # OmegaConf names the key from the region: named here from the config's root.
            exc.full_key = f"cloud.regions.{name}.{exc.full_key}"
            raise _refusal(exc, None, None) from None
        with open_dict(regions):
            regions[name] = typed


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

    from orchestrator.config.compose_cache import schema

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
            return unparsable(overrides, e)
        region = _unknown_region_merged(e, chain)
        if region is not None:
            return ConfigError(f"cloud.regions.{region}", _unknown_region_message(region, overrides))
    for e in chain:
        if isinstance(e, OmegaConfBaseException) and getattr(e, "full_key", None):
            parts = str(e.full_key).split(".")
            # Hydra refuses a key under cloud.regions that names no region of the cloud.
            if isinstance(e, (ConfigAttributeError, ConfigKeyError)) and parts[:2] == ["cloud", "regions"]:
                if len(parts) >= 3:
                    return ConfigError(".".join(parts[:3]), _unknown_region_message(parts[2], overrides))
            return _refusal(e, None, _faults_given(overrides))
    return ConfigError("config", _first_line(exc))


def _unknown_region_merged(e: BaseException, chain: list[BaseException]) -> str | None:
    """The region an override under cloud.regions.<name> names when Hydra could not merge it
    because the cloud has no such region (OmegaConf then names the region alone)."""
    from hydra.errors import ConfigCompositionException

    marker = "Error merging override "
    if not isinstance(e, ConfigCompositionException) or not str(e).startswith(marker):
        return None
    key = str(e)[len(marker) :].partition("=")[0]
    if not _region_key(key):
        return None
    region = key.lstrip("+~").split(".")[2]
    if any(getattr(x, "full_key", None) == region for x in chain):
        return region
    return None


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
