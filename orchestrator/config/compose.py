"""Compose Hydra configs from command-line overrides into a typed, validated Config.

We call Hydra's compose API rather than ``@hydra.main``: a bad key must end in
one line and exit status 2, and a run must not change the working directory.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from orchestrator.config.bounds import refuse_unbounded
from orchestrator.config.hydra_errors import refusal, refuse_sweeps, refuse_unhonoured, region_key, translate
from orchestrator.config.notify_targets import refuse_kept
from orchestrator.config.overrides import refuse_no_ops
from orchestrator.config.schema import Config, RegionConfig
from orchestrator.config.typed import build
from orchestrator.config.validate import validate
from orchestrator.errors import ConfigError

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
    refuse_unbounded(overrides)
    refuse_unhonoured(overrides)
    refuse_sweeps(overrides)
    refuse_no_ops(overrides, [g for g, option in primary_defaults(conf_dir) if option is not None])
    given, additions = split_region_additions(_free_form(_absolute_home(overrides)))
    GlobalHydra.instance().clear()
    try:
        with compose_cache.parse_trees_reused():
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
        raise translate(exc, overrides, conf_dir) from None
    finally:
        GlobalHydra.instance().clear()
    assert isinstance(plain, dict)
    _settle_code(plain["job"], overrides)
    cfg = typed_config(plain)
    refuse_kept(cfg.notify)
    return Composed(_validated(cfg), choices, searchpath)


def primary_defaults(conf_dir: Path = CONF_DIR) -> list[tuple[str, str | None]]:
    """conf/config.yaml's defaults list, in order: (group, its default option) for a
    config group, (name, None) for a config (the schema base_config, _self_)."""
    path = conf_dir / "config.yaml"
    st = path.stat()
    return list(_primary_defaults(path, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=16)
def _primary_defaults(path: Path, mtime_ns: int, size: int) -> tuple[tuple[str, str | None], ...]:
    # Read once per version of the file: every composition asks for it.
    from omegaconf import OmegaConf

    out: list[tuple[str, str | None]] = []
    for entry in OmegaConf.to_container(OmegaConf.load(path))["defaults"]:  # type: ignore[index]
        if isinstance(entry, dict):
            ((group, option),) = entry.items()
            out.append((str(group), str(option)))
        else:
            out.append((str(entry), None))
    return tuple(out)


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
        if key.startswith("+") and not key.startswith("++") and region_key(key) and parts[3] in _REGION_FIELDS:
            added.add(parts[2])
    given: list[str] = []
    additions: dict[str, list[str]] = {}
    for o in overrides:
        key = o.partition("=")[0]
        region = key.lstrip("+~").split(".")[2] if region_key(key) else None
        if region in added and not key.startswith("~"):
            additions.setdefault(region, []).append(o)
        else:
            given.append(o)
    return given, additions


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
            raise refusal(exc, None, None) from None
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
            if plain.strip() and not plain.startswith("/") and not {"'", "\\", "$"} & set(plain) and _plain_path(plain):
                o = f"{key}={_quoted(os.path.abspath(os.path.expanduser(plain)))}"
        out.append(o)
    env = os.environ.get("ORCHESTRATOR_HOME")
    if (
        not given
        and env is not None
        and not env.startswith("/")
        and not {"'", "\\", "$"} & set(env)
        and _plain_path(env)
    ):
        out.append(f"home={_quoted(os.path.abspath(os.path.expanduser(env)) if env.strip() else '')}")
    return out


def _plain_path(text: str) -> bool:
    """No URL and no fsspec chain: made absolute, either would lose what validate refuses."""
    return "::" not in text and "://" not in text


def _quoted(text: str) -> str:
    return f"'{text}'"


# Mappings whose keys are the user's to choose: job.params.hidden=64 adds the key (Hydra's
# struct mode would want '+') or replaces it; so do hpo.search_space.job.params.hidden=...
# and tracking.tags.team=nlp.
FREE_FORM = ("job.params.", "hpo.search_space.", "tracking.tags.")


def _free_form(overrides: list[str]) -> list[str]:
    return [f"++{o}" if o.startswith(FREE_FORM) and "=" in o else o for o in overrides]


def _settle_code(job: dict[str, Any], overrides: list[str]) -> None:
    """What trains, as the command line says: ``job.train_func=m:f`` over the default job
    replaces its workload (and the other way round); both on one command line stay both,
    and validate refuses them. The run is named after the code the command line gives,
    unless it gives job.name too: a job config's name is its own workload's
    (``job=digits_hpo job.workload=m:Net`` searches Net, and is no digits_hpo run)."""
    given = {o.partition("=")[0].lstrip("+~") for o in overrides if "=" in o}
    if "job.train_func" in given and "job.workload" not in given:
        job["workload"] = ""
    if "job.workload" in given and "job.train_func" not in given:
        job["train_func"] = ""
    code = job["train_func"] if "job.train_func" in given else job["workload"] if "job.workload" in given else None
    if code and "job.name" not in given:
        name = str(code).rpartition(":")[2].rpartition(".")[2].lower()
        safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "-" for c in name)[:60].strip("-_")
        job["name"] = safe or job["name"]


def typed_config(plain: dict[str, Any]) -> Config:
    """A plain mapping of the config's keys as a Config: OmegaConf, merging it into the schema,
    converts each value to its field's type and refuses a wrong type, a value outside a
    closed set and an unknown key (ConfigError naming it)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from orchestrator.config.compose_cache import schema

    fast = build(Config, plain)
    if fast is not None:
        return _normalized(fast)
    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(schema(Config), plain))
    except OmegaConfBaseException as exc:
        chaos = plain.get("chaos")
        raise refusal(exc, plain, chaos.get("faults") if isinstance(chaos, dict) else None) from None
    assert isinstance(cfg, Config)
    return _normalized(cfg)


def _normalized(cfg: Config) -> Config:
    for region in cfg.cloud.regions.values():
        region.store = _normalize_store(region.store)
    if cfg.cloud.control_store is not None:
        cfg.cloud.control_store = _normalize_store(cfg.cloud.control_store)
    cfg.home = _normalize_home(cfg.home)
    return cfg


def _normalize_store(url: str) -> str:
    # A file:// store under "~" must name one place, whoever resolves it later. A
    # relative one stays as it is, for validate to refuse (relative to what?).
    if isinstance(url, str) and url.startswith(("file:///", "file://~")) and url.count("://") == 1 and "::" not in url:
        return "file://" + os.path.abspath(os.path.expanduser(url[len("file://") :]))
    return url


def _normalize_home(home: Any) -> Any:
    # Empty stays empty: made absolute it would be the working directory, and validate refuses it.
    if isinstance(home, str) and home.strip() and "\x00" not in home and _plain_path(home):
        return os.path.abspath(os.path.expanduser(home))
    return home
