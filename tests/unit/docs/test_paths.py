"""Every file of the repository the docs name exists: a moved or deleted module leaves no
stale name in the README or under docs/ (docs/design/architecture.md once named two).

What counts as naming a file, in a code span: a path from the repository's root that
starts with one of its folders and ends in a file's suffix or ``/`` (``recovery/policy.py``,
``orchestrator/runtime/``; a ``:name`` after it, as in ``recovery/policy.py:decide``, is
dropped), or a bare module name ending in ``.py`` (``lease.py``), which must be some file's
name. Placeholders (``<name>``, ``NAME.yaml``, globs) name no file. A path relative to a
user's own project (the example project's ``conf/job/seq.yaml``) is written from the
repository's root where the docs mean this repository's file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.unit

TOPS = ("orchestrator/", "providers/", "recovery/", "benchmarks/", "tests/", "conf/", "docs/", "examples/", ".ci/")
_SPAN = re.compile(r"`([^`\s]+)`")
_FILE = re.compile(r".+(\.(py|md|yaml|yml|json|toml|txt|png|sh|csv|cfg)|/)")
_PLACEHOLDER = re.compile(r"[<>*{}$?]|(^|/)[A-Z_]+\.\w+$")


def _docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def named_paths(text: str) -> list[tuple[int, str]]:
    """(line, path) of each repository file a Markdown text names (the rule above)."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in _SPAN.finditer(line):
            path = m.group(1).split(":")[0].rstrip(",.;)")
            if _PLACEHOLDER.search(path):
                continue
            if path.startswith(TOPS) and _FILE.fullmatch(path):
                found.append((n, path))
            elif "/" not in path and path.endswith(".py"):
                found.append((n, path))
    return found


def test_the_rule_reads_paths_and_module_names_and_skips_placeholders() -> None:
    text = "`recovery/policy.py:decide`, `orchestrator/runtime/`, `lease.py`, `conf/job/NAME.yaml`, `x/y`\n`<a>/b.py`"
    assert named_paths(text) == [(1, "recovery/policy.py"), (1, "orchestrator/runtime/"), (1, "lease.py")]


def test_every_file_the_docs_name_exists() -> None:
    basenames = {p.name for top in TOPS for p in (REPO / top).rglob("*.py")}
    missing = []
    for doc in _docs():
        for n, path in named_paths(doc.read_text(encoding="utf-8")):
            exists = path in basenames if "/" not in path else (REPO / path).exists()
            if not exists:
                missing.append(f"{doc.relative_to(REPO)}:{n}: {path}")
    assert missing == []
