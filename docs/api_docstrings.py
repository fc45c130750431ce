"""A griffe extension for the API page (reference/api.md): docstrings as this code writes them.

mkdocstrings renders a docstring as Markdown, where a bare ``cloud.regions.<name>`` is an
HTML tag that the page swallows; and a dataclass's fields carry comments, not docstrings,
so the page would list none of what they mean. This extension, named in mkdocs.yml:

- makes every ``<`` that would open a tag (outside code spans and fenced blocks) ``&lt;``;
- gives a class attribute with no docstring the comment beside it in the source: the
  comment lines right above it and the one ending its line, the rule the generated config
  page (``gen_reference.py``) reads the same comments by.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import griffe


def _generator() -> ModuleType:
    # One rule for reading comments and escaping, shared with the pages gen_reference.py writes.
    name = "gen_reference"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("gen_reference.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def escape_docstring(text: str) -> str:
    """``text`` with what Markdown would take for raw HTML escaped, line by line, except in
    fenced code blocks and doctest lines (shown verbatim: an escape there would show)."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and not stripped.startswith((">>>", "...")):
            line = GEN.escape_tags(line)
        out.append(line)
    return "\n".join(out)


class ApiDocstrings(griffe.Extension):
    """Escapes what would be swallowed as HTML, and documents class attributes by their comments."""

    def __init__(self) -> None:
        super().__init__()
        self._comments: dict[str, tuple[list[str], dict[int, str]]] = {}

    def _source_comments(self, agent: griffe.Visitor) -> tuple[list[str], dict[int, str]]:
        key = str(agent.filepath)
        if key not in self._comments:
            self._comments[key] = (agent.code.splitlines(), GEN._comments(agent.code))
        return self._comments[key]

    def on_instance(self, *, node: ast.AST | griffe.ObjectNode, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = escape_docstring(obj.docstring.value)

    def on_attribute_instance(
        self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute, agent: Any, **kwargs: Any
    ) -> None:
        # Only what static analysis read from a file has comments to read.
        if attr.docstring is not None or not isinstance(agent, griffe.Visitor) or attr.lineno is None:
            return
        if attr.parent is None or not attr.parent.is_class:
            return
        lines, comments = self._source_comments(agent)
        text = GEN._described(lines, comments, attr.lineno)
        if text:
            attr.docstring = griffe.Docstring(
                GEN.escape_tags(text), lineno=attr.lineno, endlineno=attr.lineno, parent=attr
            )
