"""The command line's options: the Hydra flags this command honours, taken off the
command line before the rest (KEY=VALUE, GROUP=OPTION) is composed. The others are
refused by name, each with why: taken and ignored, they would seem to work.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from orchestrator.config.bounds import refuse_unbounded
from orchestrator.errors import ConfigError

# --cfg job|hydra|all: the config composed, the Hydra settings honoured, or both.
CFG_KINDS = ("job", "hydra", "all")
# --info [KIND]: Hydra's kinds that mean something here (plugins, a defaults tree: nothing).
INFO_KINDS = ("all", "searchpath", "defaults")
HELP_WORDS = ("-h", "--help", "help")
OPTIONS_LINE = (
    "options are --config-dir DIR, --cfg job|hydra|all, -m (--multirun), --info and --help; settings are KEY=VALUE"
)
_SAVED = "put a config --cfg job printed in DIR/experiment/NAME.yaml and give --config-dir DIR +experiment=NAME"
# Hydra's flags this command does not take, and why.
REFUSED_FLAGS = {
    "--shell-completion": "shell completion is not offered (it needs Hydra's @hydra.main, which this command does "
    "not run under); --help lists every group and key",
    "--hydra-help": "Hydra's own help is for an application run by @hydra.main; --help is this command's",
    "--config-path": "give your config folder with --config-dir DIR (searched after ours)",
    "--config-name": f"the primary config is ours (conf/config.yaml); to run a saved config, {_SAVED}",
    "--package": "--cfg prints the whole config; it takes no --package",
    "--experimental-rerun": "a stopped run goes on with action=resume run_id=<id>",
    "--version": "see pip show orchestrator",
}
_SHORT = {"-sc": "--shell-completion", "-cp": "--config-path", "-cn": "--config-name", "-p": "--package"}


@dataclass
class Options:
    """A command line: its options, and the overrides left (--config-dir's folders as
    the override Hydra takes them, ``hydra.searchpath=[...]``)."""

    overrides: list[str] = field(default_factory=list)
    config_dirs: list[str] = field(default_factory=list)  # absolute
    cfg: str | None = None
    multirun: bool = False
    info: str | None = None
    help: bool = False


def parse_args(args: list[str]) -> Options:
    """The options of ``args``; ConfigError (one line naming the flag) for one refused,
    misspelt or missing its value."""
    # Before a word is parsed (here, by the sweep or by Hydra): see config.bounds.
    refuse_unbounded(args)
    opts = Options()
    dirs: list[str] = []
    rest = _Args(args)
    for a in rest:
        name, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        if a in HELP_WORDS:
            opts.help = True
        elif name in ("--config-dir", "-cd"):
            dirs.append(value if eq else rest.value(name, "needs a folder: --config-dir ~/proj/conf"))
        elif name in ("--cfg", "-c"):
            kind = value if eq else rest.value(name, f"needs what to print: --cfg {'|'.join(CFG_KINDS)}")
            if kind not in CFG_KINDS:
                raise ConfigError("--cfg", f"got {kind!r}; allowed: {', '.join(CFG_KINDS)}")
            opts.cfg = kind
        elif name == "--resolve":
            pass  # --cfg prints the config resolved, always: the typed config a run gets
        elif a in ("-m", "--multirun"):
            opts.multirun = True
        elif name == "--info":
            kind = value if eq else rest.optional(INFO_KINDS, hydra_kinds=("config", "defaults-tree", "plugins"))
            if kind not in INFO_KINDS:
                raise ConfigError("--info", f"got {kind!r}; allowed: {', '.join(INFO_KINDS)} (the config: --cfg job)")
            opts.info = kind
        elif _SHORT.get(name, name) in REFUSED_FLAGS:
            raise ConfigError(name, REFUSED_FLAGS[_SHORT.get(name, name)])
        elif a.startswith("-"):
            raise ConfigError(name, f"not an option of python -m orchestrator; {OPTIONS_LINE}")
        else:
            opts.overrides.append(a)
    if opts.cfg is not None and opts.info is not None:
        raise ConfigError("--info", "--cfg and --info print different things; give one")
    if opts.info is not None and opts.multirun:
        raise ConfigError("--info", "shows where configs come from, the same for every run of a sweep; drop -m")
    opts.config_dirs = [_folder(d) for d in dirs]
    if opts.config_dirs:
        # One search path: a hydra.searchpath given too is kept after --config-dir's
        # folders, not replaced by them (the last override of a key wins in Hydra).
        paths = ["file://" + d for d in opts.config_dirs]
        keep = []
        for o in opts.overrides:
            if o.partition("=")[0].lstrip("+~") == "hydra.searchpath":
                paths += _listed(o)
            else:
                keep.append(o)
        opts.overrides = [*keep, f"hydra.searchpath=[{','.join(repr(p) for p in paths)}]"]
    return opts


def _listed(override: str) -> list[str]:
    """The folders of a ``hydra.searchpath=[...]`` override, read by Hydra's own parser."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        value = OverridesParser.create().parse_override(override).value()
    except HydraException as exc:
        raise ConfigError("hydra.searchpath", f"cannot be read: {str(exc).splitlines()[0]}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError("hydra.searchpath", "expected a list of folders: hydra.searchpath=[file:///path]")
    return list(value)


def _folder(d: str) -> str:
    """``--config-dir DIR`` (``-cd DIR``), absolute: the user's own config folder, searched
    after ours (``job=mine`` finds ``DIR/job/mine.yaml``); given to Hydra as
    ``hydra.searchpath=[file://DIR]``, which is also taken as it is."""
    path = os.path.abspath(os.path.expanduser(d))
    if not os.path.isdir(path):
        raise ConfigError("--config-dir", f"{d!r} is not a folder; give the folder that holds job/NAME.yaml")
    return path


class _Args:
    """The command line's words, one at a time; an option takes the next as its value."""

    def __init__(self, args: list[str]) -> None:
        self._args = list(args)
        self._i = 0

    def __iter__(self) -> Iterator[str]:
        while self._i < len(self._args):
            self._i += 1
            yield self._args[self._i - 1]

    def value(self, name: str, missing: str) -> str:
        if self._i >= len(self._args):
            raise ConfigError(name, missing)
        self._i += 1
        return self._args[self._i - 1]

    def optional(self, kinds: tuple[str, ...], hydra_kinds: tuple[str, ...]) -> str:
        """The next word when it is one of ``kinds`` (or of Hydra's, to be refused by
        name), else the first of ``kinds``: Hydra's ``--info`` takes its value optionally."""
        if self._i < len(self._args) and self._args[self._i] in kinds + hydra_kinds:
            self._i += 1
            return self._args[self._i - 1]
        return kinds[0]
