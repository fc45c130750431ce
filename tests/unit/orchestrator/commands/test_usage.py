"""The help text (orchestrator/commands/usage.py): every key, closed set, group and action, before
anything is composed."""

from __future__ import annotations

import re
import typing
from dataclasses import fields, is_dataclass
from enum import Enum

import pytest

from orchestrator.__main__ import main
from orchestrator.commands.usage import ACTIONS, TOP_LEVEL, key_lines, usage
from orchestrator.config.compose import CONF_DIR
from orchestrator.config.schema import Action, Config

pytestmark = pytest.mark.unit


def _schema_keys(cls: type, prefix: str) -> set[str]:
    """Every key of the schema, walked here apart from orchestrator/commands/usage.py: a section's
    fields, a mapping of sections as <name>, a list of them as [i], a free-form mapping as <key>."""
    out: set[str] = set()
    hints = typing.get_type_hints(cls)
    for f in fields(cls):  # type: ignore[arg-type]
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) is not None and len(args) == 1 and typing.get_origin(hint) not in (list, dict):
            hint = args[0]  # X | None
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        key = f"{prefix}{f.name}"
        if is_dataclass(hint):
            out |= _schema_keys(hint, key + ".")  # type: ignore[arg-type]
        elif origin is dict and is_dataclass(args[1]):
            out |= _schema_keys(args[1], key + ".<name>.")
        elif origin is dict:
            out.add(key + ".<key>")
        elif origin is list and is_dataclass(args[0]):
            out.add(key)
            out |= _schema_keys(args[0], key + "[i].")
        else:
            out.add(key)
    return out


def _help_keys(text: str) -> set[str]:
    """The keys the help's "keys" section names, as dotted keys."""
    section = text.split("\nkeys (", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    entries: list[list[str]] = []
    for line in section:
        if line.startswith(" " * 4):
            # A closed set's values wrap after a '|'.
            entries[-1][1] += ("" if entries[-1][1].endswith("|") else " ") + line.strip()
        elif line.strip().startswith(TOP_LEVEL):
            entries.append(["", line.strip()[len(TOP_LEVEL) :].strip()])
        else:
            prefix, _, rest = line.strip().partition(" ")
            entries.append([prefix, rest.strip()])
    out: set[str] = set()
    for prefix, text in entries:
        for token in text.split():
            name = token.partition("=")[0]
            if not name.endswith(".<name>"):  # the mapping's own line names its keys
                out.add(prefix + name)
    return out


def test_help_names_every_key_of_the_schema_and_no_other() -> None:
    assert _help_keys(usage()) == _schema_keys(Config, "")


def test_help_shows_each_closed_set_with_its_values() -> None:
    text = " ".join(" ".join(tokens) for _, tokens in key_lines())
    for cls in (Config, *[typing.get_type_hints(Config)[f.name] for f in fields(Config)]):
        if not is_dataclass(cls):
            continue
        for f in fields(cls):
            hint = typing.get_type_hints(cls)[f.name]
            if isinstance(hint, type) and issubclass(hint, Enum):
                assert f"{f.name}={'|'.join(str(m.value) for m in hint)}" in text


def test_help_lists_every_config_group_with_its_options_and_every_action() -> None:
    text = usage()
    groups = text.split("\nconfig groups (", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    listed = {line.split()[0]: line.split(None, 1)[1] for line in groups if not line.startswith(" " * 4)}
    on_disk = {d.name: sorted(f.stem for f in d.glob("*.yaml")) for d in CONF_DIR.iterdir() if d.is_dir()}
    assert set(listed) == set(on_disk) >= {"job", "cloud", "recovery", "chaos", "data"}
    joined = " ".join(line.strip() for line in groups)
    for group, options in on_disk.items():
        for option in options:
            assert re.search(rf"\b{re.escape(option)}\b", joined), (group, option)
    assert "digits (default)" in text and "sharded (default)" in text
    assert set(ACTIONS) == set(Action)


def test_help_is_printed_before_anything_is_composed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["job=nosuch", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python -m orchestrator")
