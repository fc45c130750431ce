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
    ChaosConfig,
    CheckpointConfig,
    CloudConfig,
    Config,
    ConfigError,
    DataConfig,
    FaultConfig,
    HpoConfig,
    JobConfig,
    RandomTrigger,
    RecoveryConfig,
    RegionConfig,
    TrainerConfig,
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
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    _register()
    refuse_unhonoured(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            raw = hydra_compose(config_name="config", overrides=_free_form(_absolute_home(overrides)))
        plain = OmegaConf.to_container(raw, resolve=True, throw_on_missing=True)
    except Exception as exc:
        raise _translate(exc, overrides) from None
    finally:
        GlobalHydra.instance().clear()
    assert isinstance(plain, dict)
    _check_keys(plain, Config, "")
    _settle_code(plain["job"], overrides)
    return validate(_typed(plain))


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


def _check_keys(node: Any, schema: Any, prefix: str) -> None:
    """Keys added with '+' pass Hydra's struct check; they must still be ones we know."""
    import typing
    from dataclasses import fields, is_dataclass

    if not (is_dataclass(schema) and isinstance(node, dict)):
        return
    hints = typing.get_type_hints(schema)
    names = {f.name for f in fields(schema)}
    for key, value in node.items():
        full = f"{prefix}{key}"
        if key not in names:
            raise ConfigError(full, _unknown_key_message(full))
        t = hints[key]
        origin, args = typing.get_origin(t), typing.get_args(t)
        expected = "a mapping" if origin is dict or is_dataclass(t) else "a list" if origin is list else None
        if expected and value is not None and not isinstance(value, dict if expected == "a mapping" else list):
            raise ConfigError(full, f"got {type(value).__name__}; expected {expected}")
        if origin is dict and isinstance(value, dict):
            for name, item in value.items():
                _check_keys(item, args[1], f"{full}.{name}.")
        elif origin is list and isinstance(value, list):
            for i, item in enumerate(value):
                _check_keys(item, args[0], f"{full}[{i}].")
        else:
            _check_keys(value, t, f"{full}.")


def _typed(d: dict[str, Any]) -> Config:
    cloud = d["cloud"]
    regions = {
        name: RegionConfig(
            **{
                **r,
                "store": _normalize_store(r["store"]),
                "storage_options": dict(r.get("storage_options") or {}),
            }
        )
        for name, r in cloud["regions"].items()
    }
    return Config(
        job=JobConfig(**d["job"]),
        trainer=TrainerConfig(**d["trainer"]),
        checkpoint=CheckpointConfig(**d["checkpoint"]),
        cloud=CloudConfig(
            name=cloud["name"],
            provider=cloud["provider"],
            regions=regions,
            candidates=list(cloud["candidates"]),
            provision_timeout_s=cloud.get("provision_timeout_s", 60.0),
            control_store=None if cloud.get("control_store") is None else _normalize_store(cloud["control_store"]),
            control_options=dict(cloud.get("control_options") or {}),
        ),
        recovery=RecoveryConfig(**d["recovery"]),
        chaos=ChaosConfig(faults=[_fault(f) for f in d["chaos"]["faults"]], supervise=d["chaos"]["supervise"]),
        data=DataConfig(**d["data"]),
        hpo=HpoConfig(**{**d["hpo"], "search_space": dict(d["hpo"].get("search_space") or {})}),
        action=d["action"],
        run_id=None if d["run_id"] is None else str(d["run_id"]),
        home=_normalize_home(d["home"]),
        progress=d["progress"],
    )


def config_from_plain(d: Any) -> Config:
    """A config saved with ``to_plain`` (a run's config.json), typed and validated again:
    a damaged or edited file is a ConfigError naming the key, like a bad command line."""
    if not isinstance(d, dict):
        raise ConfigError("config", f"got {type(d).__name__}; expected a mapping of the config's keys")
    _check_keys(d, Config, "")
    try:
        cfg = _typed(d)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0]), "is missing") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError("config", f"a section is not a mapping of its keys ({_first_line(exc)})") from None
    return validate(cfg)


def _fault(f: dict[str, Any]) -> FaultConfig:
    rnd = f.get("random")
    return FaultConfig(**{**f, "random": None if rnd is None else RandomTrigger(**rnd)})


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
    from omegaconf.errors import (
        ConfigAttributeError,
        ConfigKeyError,
        MissingMandatoryValue,
        OmegaConfBaseException,
        ValidationError,
    )

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
            key = str(e.full_key)
            if isinstance(e, (ConfigAttributeError, ConfigKeyError)) and " not in " in str(e):
                key = _qualify(key, str(e))
                parts = key.split(".")
                if parts[:2] == ["cloud", "regions"] and len(parts) >= 3:
                    region_key = ".".join(parts[:3])
                    return ConfigError(region_key, _unknown_region_message(parts[2], overrides))
                return ConfigError(key, _unknown_key_message(key))
            if isinstance(e, MissingMandatoryValue):
                return ConfigError(key, "is required but has no value; set it with " + key + "=...")
            if isinstance(e, ValidationError):
                value = getattr(e, "value", None)
                expected = _expected_type(str(e))
                return ConfigError(key, f"got {value!r}; expected {expected}")
            return ConfigError(key, _first_line(e))
    return ConfigError("config", _first_line(exc))


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


_SCHEMA_PREFIX = {
    "JobConfig": "job",
    "TrainerConfig": "trainer",
    "CheckpointConfig": "checkpoint",
    "CloudConfig": "cloud",
    "RecoveryConfig": "recovery",
    "ChaosConfig": "chaos",
    "DataConfig": "data",
    "HpoConfig": "hpo",
    "FaultConfig": "chaos.faults[]",
    "RandomTrigger": "chaos.faults[].random",
}


def _qualify(key: str, message: str) -> str:
    # Inside a list element OmegaConf reports the key relative to the element.
    if "." in key:
        return key
    for schema, prefix in _SCHEMA_PREFIX.items():
        if f"'{schema}'" in message:
            return f"{prefix}.{key}"
    return key


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
        if f"to {word}" in lowered or f"type {word}" in lowered:
            return text
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
