"""Hydra's composition of the config groups, reused within one process.

Hydra builds a config in three steps: the defaults list from the group choices
(``job=digits``), the merge of every config it names (ours and Hydra's own), then each
``KEY=VALUE`` override applied to the result. The first two are most of a composition's
time (about 0.25 s of 0.3 s) and depend only on the group choices, the files of the search
path and the ConfigStore, while command lines mostly differ in their values: a process
that composes again (the test suite does hundreds of times) merges once per set of group
choices and applies the values to a copy.

The result is Hydra's own, step by step: :func:`compose` follows
``ConfigLoaderImpl._load_configuration_impl`` of the Hydra versions in ``SUPPORTED_HYDRA``
(any other runs Hydra's compose as it is). A merge is reused only while

- the search path is the same and every file under it is as it was (kind, inode, size,
  modification and change times; a file changed in the two seconds before the merge is
  not trusted to show its next change, and that merge is not kept);
- the ConfigStore holds the same nodes;
- the merge evaluated no resolver but Hydra's ``now`` on the merged root (Hydra merges
  its own ``hydra.run.dir`` over its default there, leaving the time in the root's
  resolver cache; a reuse evaluates those calls again, so ``${now:...}`` reads this
  call's time): ``${oc.env:...}`` and any other is then resolved where the caller
  resolves the config, per call;
- the merge raised no warning (one that warns is redone as Hydra would, and not kept);
- no config it loaded lies outside the search path (``job=../x``).

A failed merge is never kept: its error is raised each time.
"""

from __future__ import annotations

import copy
import gc
import os
import pickle
import stat
import sys
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

SUPPORTED_HYDRA = ("1.3.8",)
# Merges kept (about 1 MB each): one per set of group choices and search path.
MAX_ENTRIES = 32
# A config folder bigger than this is not fingerprinted (its merges are not kept).
MAX_FILES = 2000
# A file changed this recently may change again within the file system's clock tick.
RACY_NS = 2_000_000_000


@dataclass
class _Merge:
    fingerprint: tuple[Any, ...]
    config: Any  # the merged DictConfig, never handed out: each use gets a deep copy
    known_choices: dict[str, Any]
    now_calls: list[tuple[tuple[Any, ...], tuple[str, ...]]]
    store_nodes: tuple[Any, ...]  # keeps the ConfigStore's nodes alive, so their ids stay theirs
    # The same, pickled: unpickled, a copy as deep as deepcopy's at a fraction of its cost (None:
    # it does not pickle, and copies are deep-copied).
    pickled: bytes | None


_merges: OrderedDict[tuple[Any, ...], _Merge] = OrderedDict()
# The primary configs loaded (fingerprint, pickled ConfigResult): see _load_primary.
_primaries: dict[tuple[Any, ...], tuple[tuple[Any, ...], bytes]] = {}
stats = {"reused": 0, "merged": 0, "primary_loaded": 0}


def supported() -> bool:
    import hydra

    return hydra.__version__ in SUPPORTED_HYDRA


def clear() -> None:
    _merges.clear()
    _primaries.clear()
    _parsed.clear()
    _schemas.clear()
    stats.update(reused=0, merged=0, primary_loaded=0)


_schemas: dict[type, Any] = {}


def schema(cls: type) -> Any:
    """``OmegaConf.structured(cls)``, made once: for ``OmegaConf.merge(schema(cls), x)``,
    which merges into a copy of it (a dataclass's defaults do not change in a process;
    Hydra's ConfigStore keeps its structured nodes the same way)."""
    from omegaconf import OmegaConf

    node = _schemas.get(cls)
    if node is None:
        node = _schemas[cls] = OmegaConf.structured(cls)
    return node


def compose(config_name: str, overrides: list[str], keep_hydra: bool = False) -> Any:
    """``hydra.compose(config_name, overrides, return_hydra_config=keep_hydra)`` under the
    initialized GlobalHydra: the same config (with the ``hydra`` node only if
    ``keep_hydra``: its runtime.choices and config_sources) or the same exception."""
    from hydra import compose as hydra_compose
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException
    from omegaconf import open_dict
    from omegaconf.errors import OmegaConfBaseException

    loader = getattr(GlobalHydra.instance().hydra, "config_loader", None)
    if not supported() or type(loader) is not ConfigLoaderImpl:
        return hydra_compose(config_name=config_name, overrides=overrides, return_hydra_config=keep_hydra)
    try:
        cfg = _load_configuration(loader, config_name, overrides)
    except OmegaConfBaseException as e:
        # As ConfigLoaderImpl.load_configuration wraps it.
        raise ConfigCompositionException().with_traceback(sys.exc_info()[2]) from e
    if "hydra" in cfg and not keep_hydra:
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg


def _load_configuration(loader: Any, config_name: str, overrides: list[str]) -> Any:
    """ConfigLoaderImpl._load_configuration_impl (run mode, not from a shell), with the
    defaults list and the merge taken from ``_merges`` when they can be."""
    from hydra import __version__, version
    from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
    from hydra._internal.defaults_list import Overrides
    from hydra.conf import ConfigSourceInfo
    from hydra.core.utils import JobRuntime
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict

    loader.ensure_main_config_source_available()
    parsed_overrides, caching_repo = _parse_overrides_and_create_caching_repo(loader, config_name, overrides)
    loader.validate_sweep_overrides_legal(overrides=parsed_overrides, run_mode=RunMode.RUN, from_shell=False)

    # Hydra's own split of the overrides (its errors, in its order): the group choices
    # shape the defaults list; the rest are applied to the merged config.
    config_overrides = Overrides(repo=caching_repo, overrides_list=parsed_overrides).config_overrides
    values = {id(o) for o in config_overrides}
    choices = [o for o in parsed_overrides if id(o) not in values]

    cfg, known_choices = _merged(loader, caching_repo, config_name, choices)

    OmegaConf.set_struct(cfg, True)
    OmegaConf.set_readonly(cfg.hydra, False)
    ConfigLoaderImpl._apply_overrides_to_config(config_overrides, cfg)
    app_overrides = []
    for override in parsed_overrides:
        if override.is_hydra_override():
            cfg.hydra.overrides.hydra.append(override.input_line)
        else:
            cfg.hydra.overrides.task.append(override.input_line)
            app_overrides.append(override)

    with open_dict(cfg.hydra):
        cfg.hydra.runtime.choices.update(known_choices)
        for key in cfg.hydra.job.env_copy:
            cfg.hydra.job.env_set[key] = os.environ[key]

    cfg.hydra.runtime.version = __version__
    cfg.hydra.runtime.version_base = version.getbase()
    cfg.hydra.runtime.cwd = os.getcwd()
    cfg.hydra.runtime.config_sources = [
        ConfigSourceInfo(path=x.path, schema=x.scheme(), provider=x.provider) for x in caching_repo.get_sources()
    ]
    if "name" not in cfg.hydra.job:
        cfg.hydra.job.name = JobRuntime().get("name")
    cfg.hydra.job.override_dirname = get_overrides_dirname(
        overrides=app_overrides,
        kv_sep=cfg.hydra.job.config.override_dirname.kv_sep,
        item_sep=cfg.hydra.job.config.override_dirname.item_sep,
        exclude_keys=cfg.hydra.job.config.override_dirname.exclude_keys,
    )
    cfg.hydra.job.config_name = config_name
    return cfg


def _parse_overrides_and_create_caching_repo(loader: Any, config_name: str, overrides: list[str]) -> tuple[Any, Any]:
    """As ConfigLoaderImpl's, but the caching repository's sources are made anew from the
    loader's search path (as its repository's were) rather than deep-copied from that
    repository, whose structured source would copy the whole ConfigStore each time."""
    from hydra._internal.config_repository import CachingConfigRepository, ConfigRepository
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed_overrides = OverridesParser.create().parse_overrides(overrides=overrides)
    caching_repo = CachingConfigRepository.__new__(CachingConfigRepository)
    caching_repo.delegate = ConfigRepository(loader.config_search_path)
    caching_repo.cache = {}
    if config_name is not None:
        _load_primary(caching_repo, config_name)
    loader._process_config_searchpath(config_name, parsed_overrides, caching_repo)
    return parsed_overrides, caching_repo


@contextmanager
def _config_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """The warnings raised meanwhile by the merge, filled in as the block ends. The
    collector of cyclic garbage waits until then: a finalizer it would run (another
    library's unclosed socket, a subprocess never waited for) warns from inside the
    record as if the config had warned, and a merge that warned is not kept. A
    ResourceWarning that still comes (freed by reference count) is given on as it
    came and not counted, for the same reason: it is never a config's."""
    counted: list[warnings.WarningMessage] = []
    collecting = gc.isenabled()
    gc.disable()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield counted
    finally:
        if collecting:
            gc.enable()
        for w in caught:
            if issubclass(w.category, ResourceWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
            else:
                counted.append(w)


def _load_primary(repo: Any, config_name: str) -> None:
    """The primary config into ``repo``'s cache, where Hydra's CachingConfigRepository keeps
    it for the whole composition (Hydra's first step loads it to find ``hydra.searchpath``:
    about half of a composition whose merge is reused): a copy of the one loaded before
    while the search path is as it was, else loaded, and kept when it loaded cleanly."""
    cache_key = f"config_path={config_name}"
    sources = repo.get_sources()
    key = (config_name, tuple((s.scheme(), s.provider, s.path) for s in sources))
    fingerprint = _fingerprint(sources, _store_nodes())
    kept = _primaries.get(key)
    if kept is not None and fingerprint is not None and kept[0] == fingerprint:
        # Bytes this process pickled from a config it loaded itself (see _copy).
        repo.cache[cache_key] = pickle.loads(kept[1])
        return
    stats["primary_loaded"] += 1
    started = time.time_ns()
    with _config_warnings() as warned:
        loaded = repo.load_config(config_path=config_name)
    if warned:
        repo.cache.pop(cache_key, None)  # loaded again by Hydra, its warnings as it gives them
        return
    if loaded is None or fingerprint is None or _racy(fingerprint, started):
        return
    try:
        _primaries[key] = (fingerprint, pickle.dumps(loaded, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:
        return
    while len(_primaries) > MAX_ENTRIES:
        del _primaries[next(iter(_primaries))]


def _merged(loader: Any, repo: Any, config_name: str, choices: list[Any]) -> tuple[Any, dict[str, Any]]:
    """The defaults list's configs merged (Hydra's steps), before any value override:
    a copy of the kept merge, or a new merge, kept when it can be."""
    from hydra import version

    sources = tuple((s.scheme(), s.provider, s.path) for s in repo.get_sources())
    key = (config_name, version.getbase(), sources, tuple(o.input_line for o in choices))
    nodes = _store_nodes()
    fingerprint = _fingerprint(repo.get_sources(), nodes)
    kept = _merges.get(key)
    if kept is not None and fingerprint is not None and kept.fingerprint == fingerprint:
        cfg = _copy(kept)
        if _replay_now(cfg, kept.now_calls):
            _merges.move_to_end(key)
            stats["reused"] += 1
            return cfg, dict(kept.known_choices)
        del _merges[key]

    stats["merged"] += 1
    started = time.time_ns()
    with _config_warnings() as warned, _resolver_calls() as calls:
        cfg, known_choices = _merge(loader, repo, config_name, choices)
    if warned:
        # Redone outside the record, for the warnings (or the errors a filter makes of
        # them) to come as Hydra gives them, from configs loaded afresh.
        from hydra._internal.config_repository import CachingConfigRepository

        return _merge(loader, CachingConfigRepository(repo.delegate), config_name, choices)
    now_calls = _only_now_on(cfg, calls)
    if fingerprint is not None and now_calls is not None and not _racy(fingerprint, started) and _inside(repo):
        kept = _Merge(fingerprint, cfg, dict(known_choices), now_calls, nodes, _pickled(cfg))
        _merges[key] = kept
        _merges.move_to_end(key)
        while len(_merges) > MAX_ENTRIES:
            _merges.popitem(last=False)
        # The kept merge is never handed out; the copy's resolver cache is this merge's.
        cfg = _copy(kept)
    return cfg, dict(known_choices)


# OmegaConf's interpolation grammar: a composition parses the same few interpolations
# (``${oc.env:...}``, ``${home}``) each time it builds or resolves a config, and the
# ANTLR parse is most of what resolving costs. Parse trees are only read once made
# (OmegaConf already keeps a tree while it parses others), so one per text is reused
# while ``parse_trees_reused`` is in effect.
SUPPORTED_OMEGACONF = ("2.3.",)
MAX_PARSED = 4096
MAX_PARSED_CHARS = 512
_parsed: dict[tuple[str, str, str], Any] = {}


@contextmanager
def parse_trees_reused() -> Iterator[None]:
    """Within: OmegaConf's grammar parse of a text it parsed before is the tree it made
    then (the same text, rule and mode; short texts only, bounded). Outside: as OmegaConf is."""
    import omegaconf
    from omegaconf import _utils, base, grammar_parser

    if not omegaconf.__version__.startswith(SUPPORTED_OMEGACONF) or base.parse is not grammar_parser.parse:
        yield
        return
    parse = grammar_parser.parse

    def reused(value: str, parser_rule: str = "configValue", lexer_mode: str = "DEFAULT_MODE") -> Any:
        if not isinstance(value, str) or len(value) > MAX_PARSED_CHARS:
            return parse(value, parser_rule, lexer_mode)
        key = (value, parser_rule, lexer_mode)
        tree = _parsed.get(key)
        if tree is None:
            tree = parse(value, parser_rule, lexer_mode)  # an error is raised each time, never kept
            if len(_parsed) >= MAX_PARSED:
                _parsed.clear()
            _parsed[key] = tree
        return tree

    base.parse = _utils.parse = reused
    try:
        yield
    finally:
        base.parse = _utils.parse = parse


def _pickled(cfg: Any) -> bytes | None:
    try:
        return pickle.dumps(cfg, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None


def _copy(kept: _Merge) -> Any:
    """A deep copy of the kept merge, its resolver cache included (OmegaConf pickles
    a config whole: nodes, flags, types and cache). The bytes are only ever ``_pickled``'s,
    made in this process from a config it composed and kept in memory: nothing from a
    file, a store, the control channel or a cluster is unpickled here."""
    if kept.pickled is None:
        return copy.deepcopy(kept.config)
    return pickle.loads(kept.pickled)


def _merge(loader: Any, repo: Any, config_name: str, choices: list[Any]) -> tuple[Any, dict[str, Any]]:
    from hydra._internal.defaults_list import create_defaults_list

    defaults_list = create_defaults_list(
        repo=repo, config_name=config_name, overrides_list=choices, prepend_hydra=True, skip_missing=False
    )
    cfg = loader._compose_config_from_defaults_list(defaults=defaults_list.defaults, repo=repo)
    return cfg, defaults_list.overrides.known_choices


@contextmanager
def _resolver_calls() -> Iterator[list[tuple[str, Any, tuple[Any, ...], tuple[str, ...], Any]]]:
    """Every resolver evaluated meanwhile: (name, root config, args, their text, result)."""
    from omegaconf import OmegaConf

    calls: list[tuple[str, Any, tuple[Any, ...], tuple[str, ...], Any]] = []
    get = OmegaConf.__dict__["_get_resolver"]

    def watched(name: str) -> Any:
        resolver = get.__func__(name)
        if resolver is None:
            calls.append((name, None, (), (), None))
            return None

        def call(config: Any, parent: Any, node: Any, args: tuple[Any, ...], args_str: tuple[str, ...]) -> Any:
            result = resolver(config, parent, node, args, args_str)
            calls.append((name, config, args, args_str, result))
            return result

        return call

    OmegaConf._get_resolver = staticmethod(watched)  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        OmegaConf._get_resolver = get  # type: ignore[method-assign]


def _only_now_on(cfg: Any, calls: list[tuple[str, Any, tuple[Any, ...], tuple[str, ...], Any]]) -> list[Any] | None:
    """The merge's resolver calls, when all are ``now`` on the merged root giving text
    (a merge drops such a result, keeping it only in the root's cache); else None."""
    out = []
    for name, config, args, args_str, result in calls:
        if name != "now" or config is not cfg or not isinstance(result, str):
            return None
        out.append((args, args_str))
    return out


def _replay_now(cfg: Any, now_calls: list[tuple[tuple[Any, ...], tuple[str, ...]]]) -> bool:
    """The merge's ``now`` calls again, on the copy's root with an empty cache: the cache
    a merge made now would hold. False if ``now`` is gone or gives other than text."""
    from omegaconf import OmegaConf

    OmegaConf.clear_cache(cfg)
    if not now_calls:
        return True
    resolver = OmegaConf._get_resolver("now")
    if resolver is None:
        return False
    for args, args_str in now_calls:
        if not isinstance(resolver(cfg, cfg, cfg, args, args_str), str):
            return False
    return True


def _store_nodes() -> tuple[Any, ...]:
    from hydra.core.config_store import ConfigStore

    out: list[Any] = []

    def visit(prefix: str, d: dict[str, Any]) -> None:
        for name, value in d.items():
            if isinstance(value, dict):
                visit(f"{prefix}{name}/", value)
            else:
                out.append((f"{prefix}{name}", value))

    visit("", ConfigStore.instance().repo)
    return tuple(out)


def _fingerprint(sources: list[Any], nodes: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What the search path holds now: each folder's files as stat sees them, and the
    ConfigStore's nodes by identity. None where a source cannot be fingerprinted."""
    out: list[Any] = []
    for source in sources:
        scheme = source.scheme()
        if scheme == "file":
            tree = _tree(source.path)
        elif scheme == "pkg":
            tree = _package_tree(source.path)
        elif scheme == "structured":
            tree = ("structured", source.path, tuple((name, id(node)) for name, node in nodes))
        else:
            return None
        if tree is None:
            return None
        out.append(tree)
    return tuple(out)


def _package_tree(module: str) -> tuple[Any, ...] | None:
    from importlib import resources
    from pathlib import Path

    try:
        root = resources.files(module)
    except Exception:
        return None
    if not isinstance(root, Path):
        return None  # a zip or a namespace package: not a folder to stat
    return _tree(str(root))


def _tree(root: str) -> tuple[Any, ...] | None:
    """Every entry under root (links followed, as Hydra reads through them), with its
    kind, inode, size and times; None past MAX_FILES entries."""
    real = os.path.realpath(root)
    entries: list[tuple[Any, ...]] = []
    pending = [""]
    while pending:
        rel = pending.pop()
        try:
            names = sorted(os.listdir(os.path.join(real, rel)))
        except OSError as exc:
            entries.append((rel, "unlisted", type(exc).__name__))
            continue
        for name in names:
            path = os.path.join(rel, name)
            try:
                st = os.stat(os.path.join(real, path))
            except OSError as exc:
                entries.append((path, "unreadable", type(exc).__name__))
                continue
            entries.append((path, st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
            if stat.S_ISDIR(st.st_mode):
                pending.append(path)
            if len(entries) > MAX_FILES:
                return None
    return (real, tuple(entries))


def _racy(fingerprint: tuple[Any, ...], started_ns: int) -> bool:
    """A file changed so shortly before the merge that a change after it could leave the
    same times (the file system's clock ticks coarsely)."""
    for tree in fingerprint:
        if tree[0] == "structured":
            continue
        for entry in tree[1]:
            if len(entry) == 7 and max(entry[5], entry[6]) >= started_ns - RACY_NS:
                return True
    return False


def _inside(repo: Any) -> bool:
    """Every config the merge loaded was found under a source's folder: a name with
    ``..`` may reach a file the fingerprint does not cover."""
    cache = getattr(repo, "cache", None)
    if not isinstance(cache, dict):
        return False
    for key in cache:
        path = str(key).partition("=")[2]
        if path.startswith("/") or ".." in path.split("/"):
            return False
    return True
