"""The product's modules import each other in layers, without a circle.

Each package sits in a layer, and a module imports only from its own layer or one
below: storage and recovery logic at the bottom, then what crosses between the
controller and a cluster (the wire), the workloads and the search space, the config, the
providers, the run's state, its listeners (notify, metrics, chaos), the control loop,
the commands, the Python API (on the commands' functions), and the console
(action=console's pages of what the commands read) on top.
The runtime (code that runs on the clusters) is a side of its
own: it imports nothing of the controller's side, and the controller's side nothing of
it. There is no declared exception.

Read from the sources (every import: at module level, inside functions and under
TYPE_CHECKING), because a circle held together by late imports still ties the
modules in it: none can be read, tested or changed alone.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.unit
ROOT = REPO
PACKAGES = ("orchestrator", "providers", "recovery")
# Bottom first. A module's layer is that of the longest prefix that names it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("recovery",),
    ("orchestrator.errors", "orchestrator.wire"),
    ("orchestrator.hpo", "orchestrator.workloads"),
    ("orchestrator.config", "orchestrator.runtime"),
    ("providers",),
    ("orchestrator.runstate",),
    ("orchestrator.notify", "orchestrator.metrics", "orchestrator.chaos", "orchestrator.tracking"),
    ("orchestrator.control",),
    ("orchestrator.commands",),
    ("orchestrator.api",),
    ("orchestrator.console",),
    ("orchestrator.__main__",),
)
# What runtime code may import of the orchestrator package: itself, the wire, the
# workloads it trains, the search's pure parts and the errors it raises.
RUNTIME_MAY_IMPORT = (
    "orchestrator.runtime",
    "orchestrator.wire",
    "orchestrator.workloads",
    "orchestrator.hpo",
    "orchestrator.errors",
)
# What the wire may import of the orchestrator package: itself alone.
WIRE_MAY_IMPORT = ("orchestrator.wire",)
# Inside the runtime, bottom first (as LAYERS): the leaf modules, which import nothing of
# the runtime; checkpoints; the worker group; the loop each worker runs; a search; the
# driver. Each package's __init__.py says the same.
RUNTIME_LAYERS: tuple[tuple[str, ...], ...] = (
    ("orchestrator.runtime.fault_rendezvous", "orchestrator.runtime.notices", "orchestrator.runtime.plan"),
    ("orchestrator.runtime.checkpoint",),
    ("orchestrator.runtime.group",),
    ("orchestrator.runtime.loop",),
    ("orchestrator.runtime.search",),
    ("orchestrator.runtime.trainer", "orchestrator.runtime.__main__"),
)
# The most modules a package holds outside its sub-packages (the .py files directly in
# it, __init__.py and __main__.py counted).
MAX_LOOSE_MODULES = {"orchestrator": 8, "orchestrator/runtime": 8}


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


@functools.cache  # the sources do not change during a session; read once
def trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text()) for name, path in modules().items()}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    mods = modules()
    parsed = trees()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = defaultdict(set)
    for name in mods:
        for node in statements(parsed[name]):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                module = resolve(target)
                if module is not None and module != name and module.split(".")[0] in PACKAGES:
                    graph[name].add(module)
        graph.setdefault(name, set())
    return graph


def statements(tree: ast.AST) -> Iterator[ast.AST]:
    """Every statement of ``tree``, however nested (what ast.walk yields of them, at a
    sixth of its cost): an import is a statement, and statements are found only in
    lists of statements, handlers and match cases, never inside an expression."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                todo.extend(v for v in value if isinstance(v, (ast.stmt, ast.excepthandler, ast.match_case)))


def test_statements_reach_an_import_however_nested() -> None:
    source = """
import a
def f():
    class C:
        import b
    if x:
        import c
    else:
        for i in y:
            import d
        else:
            while z:
                import e
    try:
        import f
    except E:
        import g
    else:
        import h
    finally:
        with w:
            import i
    match m:
        case 1:
            from j import k
async def g():
    async with w:
        async for i in y:
            import l
"""
    tree = ast.parse(source)
    walked = sorted(ast.dump(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
    found = sorted(ast.dump(n) for n in statements(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
    assert len(walked) == 11 and found == walked


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_finder_sees_a_circle_made_by_a_late_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    assert circles({"a": {"b"}, "b": set()}) == []


def layer(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int | None:
    best: tuple[int, int] | None = None
    for i, names in enumerate(layers):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (best is None or len(name) > best[1]):
                best = (i, len(name))
    return None if best is None else best[0]


def test_no_import_circle_among_the_products_modules() -> None:
    graph = import_graph()
    assert "orchestrator.control.controller" in graph and "recovery.store" in graph["orchestrator.control.controller"]
    found = [sorted(c) for c in circles(graph)]
    assert not found, f"import circles: {found}"


def test_runtime_code_imports_nothing_of_the_controllers_side() -> None:
    graph = import_graph()
    seen: dict[str, str] = {}
    todo = [m for m in graph if m.startswith("orchestrator.runtime")]
    while todo:
        module = todo.pop()
        for dep in graph[module]:
            if dep not in seen:
                seen[dep] = module
                todo.append(dep)
    outside = sorted(
        f"{seen[m]} -> {m}" for m in seen if m.startswith("orchestrator") and not m.startswith(RUNTIME_MAY_IMPORT)
    )
    assert not outside, f"runtime code reaches the controller's side: {outside}"


def test_the_controllers_side_imports_no_runtime_code() -> None:
    graph = import_graph()
    reaching = sorted(
        f"{m} -> {dep}"
        for m, deps in graph.items()
        if not m.startswith(("orchestrator.runtime", "orchestrator.workloads"))
        for dep in deps
        if dep.startswith("orchestrator.runtime")
    )
    assert not reaching, f"the controller's side imports runtime code: {reaching}"


def test_the_wire_imports_nothing_of_either_side() -> None:
    graph = import_graph()
    wire = [m for m in graph if m.startswith("orchestrator.wire")]
    assert {"orchestrator.wire.spec", "orchestrator.wire.control", "orchestrator.wire.schema"} <= set(wire)
    outside = sorted(
        f"{m} -> {dep}"
        for m in wire
        for dep in graph[m]
        if dep.startswith("orchestrator") and not dep.startswith(WIRE_MAY_IMPORT)
    )
    assert not outside, f"the wire imports from a side: {outside}"


def test_every_module_has_a_layer_and_imports_nothing_above_it() -> None:
    graph = import_graph()
    roots = {"orchestrator", "providers", "recovery"}
    unplaced = sorted(m for m in graph if m not in roots and layer(m) is None)
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"
    upward = sorted(
        f"{m} (layer {layer(m)}) -> {dep} (layer {layer(dep)})"
        for m, deps in graph.items()
        if m not in roots
        for dep in deps
        if dep not in roots and layer(dep) > layer(m)  # type: ignore[operator]
    )
    assert not upward, f"imports from a lower layer to a higher one: {upward}"


def test_the_layer_check_sees_an_upward_import() -> None:
    assert layer("orchestrator.control.attempt") > layer("orchestrator.runstate.events")  # type: ignore[operator]
    assert layer("orchestrator.commands.logs") > layer("orchestrator.control.attempt")  # type: ignore[operator]
    assert layer("orchestrator.runtime.loop.worker") == layer("orchestrator.config.schema")
    assert layer("orchestrator.wire.faults") < layer("orchestrator.chaos.injector")  # type: ignore[operator]


def test_runtime_code_imports_nothing_above_its_own_layer_of_the_runtime() -> None:
    graph = import_graph()
    runtime = [m for m in graph if m.startswith("orchestrator.runtime.")]
    unplaced = sorted(m for m in runtime if layer(m, RUNTIME_LAYERS) is None)
    assert not unplaced, f"runtime modules in no layer (add them to RUNTIME_LAYERS): {unplaced}"
    upward = sorted(
        f"{m} -> {dep}"
        for m in runtime
        for dep in graph[m]
        if dep.startswith("orchestrator.runtime.") and layer(dep, RUNTIME_LAYERS) > layer(m, RUNTIME_LAYERS)  # type: ignore[operator]
    )
    assert not upward, f"runtime imports from a lower layer to a higher one: {upward}"


def test_the_runtime_layer_check_sees_an_upward_import() -> None:
    group, loop = (
        layer("orchestrator.runtime.group.spares", RUNTIME_LAYERS),
        layer("orchestrator.runtime.loop.worker", RUNTIME_LAYERS),
    )
    assert group < loop  # type: ignore[operator]
    assert layer("orchestrator.runtime.checkpoint.commit", RUNTIME_LAYERS) == 1


@pytest.mark.parametrize("package", sorted(MAX_LOOSE_MODULES))
def test_a_package_keeps_its_modules_in_folders(package: str) -> None:
    loose = sorted(p.name for p in (ROOT / package).glob("*.py"))
    most = MAX_LOOSE_MODULES[package]
    assert len(loose) <= most, f"{len(loose)} loose modules in {package}/ (at most {most}): {loose}"


def test_every_package_says_what_it_is_for() -> None:
    missing = [
        str(init.relative_to(ROOT))
        for package in PACKAGES
        for init in sorted((ROOT / package).rglob("__init__.py"))
        if not ast.get_docstring(ast.parse(init.read_text()))
    ]
    assert not missing, f"packages without a docstring in __init__.py: {missing}"


def project_bases(parsed: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Every class of ``parsed`` (module name -> its tree) by its qualified name, with those
    of its bases that are classes of ``parsed`` themselves, found through each module's
    imports (a name imported from a module that imports it in turn is followed)."""
    defined: set[str] = set()
    names: dict[str, dict[str, str]] = {}  # module -> local name -> what it names, qualified
    for module, tree in parsed.items():
        table = names.setdefault(module, {})
        for node in statements(tree):
            if isinstance(node, ast.ClassDef):
                defined.add(f"{module}.{node.name}")
                table[node.name] = f"{module}.{node.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    table[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    table[a.asname or a.name] = f"{node.module}.{a.name}"

    def resolve(qualified: str) -> str:
        for _ in range(10):  # a re-export of a re-export, at most this deep
            module, _, name = qualified.rpartition(".")
            if qualified in defined or name not in names.get(module, {}):
                break
            qualified = names[module][name]
        return qualified

    def dotted(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, ast.Attribute):
            inner = dotted(expr.value)
            return None if inner is None else f"{inner}.{expr.attr}"
        return None

    out: dict[str, list[str]] = {}
    for module, tree in parsed.items():
        for node in statements(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            found = []
            for base in node.bases:
                text = dotted(base)
                if text is None:
                    continue
                head, _, rest = text.partition(".")
                qualified = resolve(names[module].get(head, head) + (f".{rest}" if rest else ""))
                if qualified in defined:
                    found.append(qualified)
            out[f"{module}.{node.name}"] = found
    return out


def test_the_inheritance_check_sees_two_project_bases_through_imports_and_re_exports() -> None:
    sources = {
        "p.a": "class A:\n    pass\nclass B(A):\n    pass\n",
        "p.b": "from p.a import A\n",  # a re-export
        "p.c": (
            "import torch\nimport p.a\nfrom p import a\nfrom p.b import A as Base\n"
            "class Two(Base, a.B):\n    pass\n"
            "class One(p.a.A, torch.nn.Module):\n    pass\n"
        ),
    }
    found = project_bases({name: ast.parse(text) for name, text in sources.items()})
    assert found["p.c.Two"] == ["p.a.A", "p.a.B"]
    assert found["p.c.One"] == ["p.a.A"]
    assert found["p.a.B"] == ["p.a.A"] and found["p.a.A"] == []


def test_no_runtime_class_inherits_more_than_one_project_class() -> None:
    # Composition over mixins: a class of the runtime is handed its helpers (a survivor's
    # GroupRecovery, the checkpointer) rather than inheriting them. Ray's and torch's
    # classes are not the project's: a class may derive from those as it needs.
    bases = project_bases(trees())
    assert bases["orchestrator.runtime.loop.train_loop._Loop"] == ["orchestrator.runtime.loop.worker.WorkerAttempt"]
    several = sorted(
        f"{cls}({', '.join(found)})"
        for cls, found in bases.items()
        if cls.startswith("orchestrator.runtime.") and len(found) > 1
    )
    assert not several, f"runtime classes with more than one project base: {several}"
