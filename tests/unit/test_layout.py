"""The tests mirror the code: every module with logic (a def or a class) in orchestrator/,
providers/, recovery/ and benchmarks/ has its unit tests at
``tests/unit/<package path>/test_<module>.py`` (or ``test_<module>_<aspect>.py`` beside it);
a package's ``__init__.py`` is ``test_init``, a ``__main__.py`` is ``test_main``. And the
other way round: a test file under a mirrored folder names a module that is there."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.unit

MIRRORED = ("orchestrator", "providers", "recovery", "benchmarks")
UNIT = REPO / "tests" / "unit"


def has_logic(path: Path) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in ast.walk(tree))


def mirror_stem(module: Path) -> str:
    """The mirrored test file's stem for a module: ``__init__`` -> ``test_init``."""
    return "test_" + module.stem.strip("_")


def modules() -> list[Path]:
    return sorted(
        p.relative_to(REPO) for top in MIRRORED for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts
    )


def covered(module: Path) -> bool:
    folder = UNIT / module.parent
    stem = mirror_stem(module)
    return (folder / f"{stem}.py").is_file() or any(folder.glob(f"{stem}_*.py"))


def test_every_module_with_logic_has_a_unit_test_file_at_its_mirrored_path() -> None:
    # A covered module needs no parse: only the uncovered ones are read for logic.
    missing = [str(m) for m in modules() if not covered(m) and has_logic(REPO / m)]
    assert not missing, "modules with no tests/unit/<package path>/test_<module>.py: " + ", ".join(missing)


def test_every_mirrored_test_file_names_a_module_beside_its_mirror() -> None:
    stems = {(m.parent, mirror_stem(m)) for m in modules()}
    orphans = []
    for top in MIRRORED:
        for test in sorted((UNIT / top).rglob("test_*.py")):
            folder = test.parent.relative_to(UNIT)
            if not any((folder, s) in stems for s in _prefixes(test.stem)):
                orphans.append(str(test.relative_to(REPO)))
    assert not orphans, "test files that mirror no module (rename them after the module they test): " + ", ".join(
        orphans
    )


def _prefixes(stem: str) -> list[str]:
    """``test_a_b_c`` -> test_a_b_c, test_a_b, test_a: the module and an aspect of it."""
    parts = stem.split("_")
    return ["_".join(parts[:i]) for i in range(len(parts), 1, -1)]


def test_every_test_folder_is_a_package() -> None:
    folders = {p.parent for p in (REPO / "tests").rglob("*.py") if "fixtures" not in p.parts}
    loose = sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file())
    assert not loose, "test folders without an __init__.py (equal basenames need packages): " + ", ".join(loose)
