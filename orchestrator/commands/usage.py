"""``--help`` and ``--info``, made from the schema (orchestrator/config/schema.py's dataclasses)
and the config groups found on the search path (conf/, and --config-dir's folders), so
that neither can drift from what the command takes.
"""

from __future__ import annotations

import textwrap
import types
import typing
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any

from orchestrator.config.cli import CFG_KINDS, INFO_KINDS
from orchestrator.config.compose import CONF_DIR, Composed, config_groups, primary_defaults, searched_dirs
from orchestrator.config.schema import Action, Config

WIDTH = 100
# What each action does (every Action has a line: tests/unit/test_hydra_cli.py).
ACTIONS: dict[Action, str] = {
    Action.run: "train the job (the default)",
    Action.status: "show the run run_id=<id>: its state, step and incidents",
    Action.report: "print the run's incident report and write report.png",
    Action.resume: "go on with a run stopped by Ctrl-C, or whose controller died",
    Action.plan: "show placements and cost, write the SkyPilot task YAML, launch nothing",
    Action.list: "list every run under home (format=table|json)",
    Action.logs: "print an attempt's driver and rank logs (attempt=N rank=R|driver follow=true)",
    Action.stop: "stop a running run as Ctrl-C would (INTERRUPTED, checkpoints kept); action=resume goes on",
    Action.cancel: "end a running run for good (CANCELLED: clusters torn down, checkpoints kept, never resumed)",
    Action.drill: "inject a fault (fault=kill_region, preempt, ...) into a running run, as chaos.faults would",
    Action.watch: "follow a run's progress and events to its end, from any terminal (Ctrl-C leaves the run alone)",
    Action.console: "serve a web console of every run under home on 127.0.0.1 (console.port=, console.host=)",
}
OPTIONS = (
    ("--config-dir DIR, -cd DIR", "your own config groups (DIR/job/NAME.yaml, ...), searched after ours"),
    (
        f"--cfg {'|'.join(CFG_KINDS)}, -c",
        "print the config composed (job), the Hydra settings honoured (hydra), or both (all) as YAML; launch nothing",
    ),
    (
        "-m, --multirun",
        "a sweep: one run per combination of the values of KEY=a,b, KEY=range(start,stop[,step]), "
        "KEY=choice(a,b) or GROUP=glob(pattern), one after another, then a summary",
    ),
    (f"--info [{'|'.join(INFO_KINDS)}]", "the config search path, the groups and their options, the defaults list"),
    ("-h, --help", "this help"),
)
EXAMPLES = (
    "python -m orchestrator job=digits trainer.workers=1 checkpoint.interval_steps=50",
    "python -m orchestrator job=digits chaos=region_outage",
    "python -m orchestrator -m job=digits job.lr=0.03,0.05      # two runs, one after the other",
    "python -m orchestrator job=gpt --cfg job                   # the config, as YAML",
    "python -m orchestrator +cloud.regions.local-d.store=file:///tmp/d cloud.candidates=[local-d,local-a]",
    "python -m orchestrator --config-dir ~/proj/conf job=mine",
    "python -m orchestrator action=list",
    "python -m orchestrator action=status run_id=digits-20261130-120000-ab12",
    "python -m orchestrator action=resume run_id=digits-20261130-120000-ab12",
    "python -m orchestrator action=logs run_id=digits-20261130-120000-ab12 attempt=2 rank=0",
    "python -m orchestrator job=digits cloud=multi action=plan",
    "python -m orchestrator job=digits cloud=onprem       # your Slurm cluster (conf/cloud/onprem.yaml)",
)
TOP_LEVEL = "(top level)"


# --- the schema's keys ------------------------------------------------------------------------


def _unoptional(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _tokens(cls: type) -> tuple[list[str], list[tuple[str, type]]]:
    """The keys of a dataclass as --help writes them (``name``, ``name=a|b`` for a closed
    set, ``name.<key>`` for a free-form mapping, ``name=[...]`` for a list, ``name.field``
    for a nested section's fields), and the mappings or lists of sections under it, each
    with its own line: (name with its index, section class)."""
    hints = typing.get_type_hints(cls)
    tokens: list[str] = []
    nested: list[tuple[str, type]] = []
    for f in fields(cls):  # type: ignore[arg-type]
        hint = _unoptional(hints[f.name])
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if isinstance(hint, type) and issubclass(hint, Enum):
            tokens.append(f"{f.name}={'|'.join(str(m.value) for m in hint)}")
        elif is_dataclass(hint):
            sub, _ = _tokens(hint)  # type: ignore[arg-type]
            tokens.extend(f"{f.name}.{t}" for t in sub)
        elif origin is dict and is_dataclass(args[1]):
            tokens.append(f"{f.name}.<name>")
            nested.append((f"{f.name}.<name>", args[1]))
        elif origin is dict:
            tokens.append(f"{f.name}.<key>")
        elif origin is list and args and is_dataclass(args[0]):
            tokens.append(f"{f.name}=[...]")
            nested.append((f"{f.name}[i]", args[0]))
        elif origin is list:
            tokens.append(f"{f.name}=[...]")
        else:
            tokens.append(f.name)
    return tokens, nested


def key_lines() -> list[tuple[str, list[str]]]:
    """(prefix, keys) for every section of Config, nested ones after their section; the
    top-level keys last."""
    lines: list[tuple[str, list[str]]] = []
    hints = typing.get_type_hints(Config)
    for f in fields(Config):
        if is_dataclass(hints[f.name]):
            _section(f.name, hints[f.name], lines)
    sections = {f.name for f in fields(Config) if is_dataclass(hints[f.name])}
    top = [t for t in _tokens(Config)[0] if t.partition("=")[0].partition(".")[0] not in sections]
    lines.append((TOP_LEVEL, top))
    return lines


def _section(prefix: str, cls: type, lines: list[tuple[str, list[str]]]) -> None:
    tokens, nested = _tokens(cls)
    lines.append((prefix + ".", tokens))
    for name, sub in nested:
        _section(f"{prefix}.{name}", sub, lines)


# --- --help -----------------------------------------------------------------------------------


def _table(rows: list[tuple[str, str]], indent: int = 2) -> list[str]:
    """Two columns: the second wrapped to WIDTH under itself; a first column too wide for
    the others' gap puts the second on the next line."""
    gap = min(max(len(a) for a, _ in rows), 26) + 2
    out = []
    for a, b in rows:
        lead = " " * indent + a.ljust(gap)
        # A closed set's values (a|b|c) may break after a '|', and nowhere else.
        wrapped = [
            w.replace("| ", "|")
            for w in textwrap.wrap(
                b.replace("|", "| "), WIDTH - indent - gap, break_long_words=False, break_on_hyphens=False
            )
        ] or [""]
        if len(a) + 2 > gap:
            out.append(" " * indent + a)
            out.extend(" " * (indent + gap) + w for w in wrapped)
        else:
            out.append(lead + wrapped[0])
            out.extend(" " * (indent + gap) + w for w in wrapped[1:])
    return out


def group_rows(groups: dict[str, list[str]], chosen: dict[str, str]) -> list[tuple[str, str]]:
    """A config group per row: its options, the one chosen (or the default) marked."""
    rows = []
    for group, options in groups.items():
        pick = chosen.get(group)
        shown = [f"{o} (default)" if o == pick else o for o in options]
        rows.append((group, ", ".join(shown)))
    return rows


def usage() -> str:
    """--help: the options, every config group with its options (conf/), every key of the
    schema by section, the actions, examples."""
    defaults = {g: o for g, o in primary_defaults() if o is not None}
    lines = [
        "usage: python -m orchestrator [OPTION ...] [GROUP=OPTION ...] [KEY=VALUE ...]",
        "",
        "options:",
        *_table(list(OPTIONS)),
        "",
        "config groups (GROUP=OPTION: conf/GROUP/OPTION.yaml, or DIR/GROUP/OPTION.yaml with --config-dir DIR):",
        *_table(group_rows(config_groups([CONF_DIR]), defaults)),
        "",
        "keys (KEY=VALUE; +KEY=VALUE adds one, e.g. +cloud.regions.<name>.store=URL adds a region):",
        *_table([(prefix, " ".join(tokens)) for prefix, tokens in key_lines()]),
        "",
        "actions (action=NAME):",
        *_table([(str(a), text) for a, text in ACTIONS.items()]),
        "",
        "examples:",
        *("  " + e for e in EXAMPLES),
    ]
    return "\n".join(lines)


# --- --info -----------------------------------------------------------------------------------


def info(composed: Composed, kind: str) -> str:
    """--info: where configs are searched, the groups found there with this command's
    choice marked, and the defaults list as composed."""
    parts: list[str] = []
    if kind in ("all", "searchpath"):
        parts += ["config search path (searched in this order):", *("  " + s for s in composed.searchpath)]
    if kind == "all":
        groups = config_groups(searched_dirs(composed.searchpath))
        parts += ["", "config groups (* this command's choice):"]
        marked = {g: [("*" + o if composed.choices.get(g) == o else o) for o in opts] for g, opts in groups.items()}
        parts += _table([(g, " ".join(opts)) for g, opts in marked.items()])
    if kind in ("all", "defaults"):
        if parts:
            parts.append("")
        parts.append("defaults list (conf/config.yaml, with this command's choices):")
        for name, option in primary_defaults():
            parts.append(f"  {name}: {composed.choices.get(name, option)}" if option is not None else f"  {name}")
        extra = [g for g in composed.choices if g not in dict(primary_defaults())]
        parts += [f"  {g}: {composed.choices[g]}  (appended: +{g}=...)" for g in extra]
    return "\n".join(parts)
