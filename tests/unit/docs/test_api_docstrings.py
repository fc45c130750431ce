"""The API page's griffe extension: a bare ``<name>`` shows, and a dataclass's fields carry
the comments beside them; and the page lists every dataclass of the typed config."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import griffe
import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.unit


def _extension() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_docstrings", REPO / "docs" / "api_docstrings.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


EXT = _extension()

CODE = textwrap.dedent(
    '''
    """A module about cloud.regions.<name>."""

    from dataclasses import dataclass


    @dataclass
    class Region:
        """A region (cloud.regions.<name>), ``<kept>`` in code.

        ```
        <fenced> stays
        ```
        >>> f(<doctest>)
        """

        # Where its checkpoints go:
        # under <store>/<run_id>.
        store: str = ""
        nodes: int = 1  # the head included
        bare: int = 0
        documented: int = 2
        """Its own docstring wins."""
    '''
)


def _visited() -> griffe.Module:
    return griffe.visit(
        "example", filepath=Path("example.py"), code=CODE, extensions=griffe.load_extensions(EXT.ApiDocstrings())
    )


def test_a_bare_tag_in_a_docstring_is_escaped_but_code_is_not() -> None:
    module = _visited()
    assert module.docstring is not None and module.docstring.value == "A module about cloud.regions.&lt;name&gt;."
    doc = module["Region"].docstring.value
    assert doc.splitlines()[0] == "A region (cloud.regions.&lt;name&gt;), ``<kept>`` in code."
    assert "<fenced> stays" in doc and ">>> f(<doctest>)" in doc


def test_a_field_is_documented_by_the_comments_beside_it() -> None:
    cls = _visited()["Region"]
    docs = {name: (attr.docstring.value if attr.docstring else None) for name, attr in cls.attributes.items()}
    assert docs == {
        "store": "Where its checkpoints go: under &lt;store&gt;/&lt;run_id&gt;.",
        "nodes": "the head included",
        "bare": None,
        "documented": "Its own docstring wins.",
    }


def test_mkdocs_uses_the_extension_and_lists_fields_without_a_comment() -> None:
    config = (REPO / "mkdocs.yml").read_text()
    assert "- docs/api_docstrings.py:ApiDocstrings" in config
    assert "show_if_no_docstring: true" in config
    assert re.search(r"exclude_docs: \|\n(  \S+\n)*  api_docstrings\.py\n", config), "the extension is no page"


def test_the_api_page_lists_every_dataclass_of_the_typed_config() -> None:
    from orchestrator.config import schema

    page = (REPO / "docs" / "reference" / "api.md").read_text()
    block = page.split("::: orchestrator.config.schema", 1)[1].split("\n##", 1)[0]
    listed = set(re.findall(r"^ +- (\w+)$", block, re.MULTILINE))
    classes = {
        name for name, cls in inspect.getmembers(schema, dataclasses.is_dataclass) if cls.__module__ == schema.__name__
    }
    assert sorted(classes - listed) == [], "add them to docs/reference/api.md's orchestrator.config.schema members"
