"""No code outside providers/ probes a provider for what it can do: a provider declares its
capabilities (providers.base.Capability) and the controller, chaos and the commands read
that declaration. A ``getattr``/``hasattr`` with an attribute's name on anything that
names a provider, or a check of a provider's ``local_processes``, ``keeps_runtime`` or
``kill_worker`` attribute without its ``capabilities``, is a probe."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.unit
# Every folder of the product's own code but providers/ (the tests' conformance suite checks
# what a provider offers against what it declares, and may look).
SCANNED = ("orchestrator", "recovery", "benchmarks", "examples", "docs")
# The attributes providers used to be probed for, before they declared capabilities.
OLD_FLAGS = ("local_processes", "keeps_runtime")


def _names_a_provider(node: ast.AST) -> bool:
    return "provider" in ast.unparse(node).lower()


def probes(source: str) -> list[tuple[int, str]]:
    """(line, code) of each capability probe on a provider in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            # A name given as a string is a probe; a variable one forwards (a wrapper's __getattr__).
            named = len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
            if named and _names_a_provider(node.args[0]):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Attribute) and node.attr in OLD_FLAGS and _names_a_provider(node.value):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_scan_finds_the_probes_it_forbids_and_passes_what_is_not_one() -> None:
    source = """
a = getattr(provider, "kill_worker", None)
b = hasattr(self.provider, "cut_connection")
c = getattr(state.provider, 'name', '?')
d = ctx.provider.local_processes
e = getattr(self._provider, name)
f = Capability.KILL_WORKER in provider.capabilities
g = getattr(fault, "at_step")
"""
    assert [line for line, _ in probes(source)] == [2, 3, 4, 5]


def test_no_module_outside_providers_probes_a_provider() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: {code}"
        for top in SCANNED
        for path in sorted((REPO / top).rglob("*.py"))
        for line, code in probes(Path(path).read_text())
    ]
    assert not found, "read Provider.capabilities (providers.base.Capability) instead of probing: " + "; ".join(found)
