"""The packages' modules import each other without cycles, lazy imports included.

A function-level ``import`` hides a cycle from Python's import machinery, not from the
design: the two modules still need each other. So every import counts here, wherever it
is written: at the top, inside a function or a method, inside ``try`` or ``if``.

Imports under ``if TYPE_CHECKING:`` count too. They never run, so they cannot deadlock an
import, but a module that names another's types in its signatures depends on it as much
as one that calls it; hiding the cycle behind ``TYPE_CHECKING`` is the workaround the
layering rule (STYLE.md: "if a change makes you import upward ... move the code") asks
us not to use. Seams that must point up take a ``typing.Protocol`` declared below.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Collection, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("broker", "storage_stub", "loadgen", "simulation", "pipeline")

# Cycles still present, each as the sorted modules of one strongly connected component,
# with why they stay. Expected to shrink to empty; the test fails if an entry is fixed
# (so the list never lies) or if any other cycle appears.
ALLOWED_CYCLES: list[tuple[str, ...]] = []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            modules[_module_name(path)] = path
        # C extensions (their .pyi stubs) are modules too: leaves that import nothing here.
        for path in sorted((ROOT / package).rglob("*.pyi")):
            modules.setdefault(_module_name(path), path)
    return modules


def _imported_names(
    tree: ast.Module, module: str, is_package: bool, modules: Collection[str]
) -> Iterator[str]:
    """Every dotted name ``module`` imports, relative imports resolved.

    ``from a import b`` names the submodule ``a.b`` when there is one, else ``a`` itself
    (``b`` is then an attribute of ``a``'s ``__init__``). Executing ``a/__init__`` before
    ``a.b`` is Python's doing, not a dependency of the importer's, so it is not an edge.
    """
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level > 1:
                    base_parts = base_parts[: -(node.level - 1)]
                base = ".".join(base_parts)
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield submodule if submodule in modules else source


def _resolve(name: str, modules: Collection[str]) -> str | None:
    """The package module ``name`` loads: itself, or the nearest enclosing module."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


#: a line that may begin an import statement: ruff's E701 and E702 (the "E" rules are on)
#: keep each statement on lines of its own, so none follows a ``:`` or ``;``
_IMPORT_LINE = re.compile(r"^[ \t]*(?:import|from)[ \t]", re.MULTILINE)


def import_statements(source: str) -> ast.Module:
    """The source's import statements, at any depth, parsed as one module.

    Each line that begins like an import is parsed alone, with the lines its parentheses
    or backslashes continue onto: a few percent of the file, where parsing all of it was
    most of this test's time. A line inside a string that parses as an import counts too
    (an edge too many can only report a cycle, never hide one); lines that do not parse
    as an import (``from the cache ...`` in a docstring) are not imports.
    """
    lines = source.splitlines()
    starts = {source.count("\n", 0, match.start()) for match in _IMPORT_LINE.finditer(source)}
    body: list[ast.stmt] = []
    end = 0  # the first line after the last import found
    for start in sorted(starts):
        if start < end:
            continue  # a continuation line of that import
        text = ""
        for number in range(start, len(lines)):
            line = lines[number]
            text += line + "\n"
            if text.count("(") > text.count(")") or line.endswith("\\"):
                continue
            try:
                parsed = ast.parse(textwrap.dedent(text)).body
            except SyntaxError:
                break
            imports = [s for s in parsed if isinstance(s, ast.Import | ast.ImportFrom)]
            if imports:
                body.extend(imports)
                end = number + 1
            break
    return ast.Module(body=body, type_ignores=[])


def import_graph() -> dict[str, set[str]]:
    modules = _package_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        if path.suffix == ".pyi":
            continue
        tree = import_statements(path.read_text())
        is_package = path.name == "__init__.py"
        for imported in _imported_names(tree, name, is_package, modules):
            target = _resolve(imported, modules)
            if target is not None and target != name:
                graph[name].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Tarjan's components of more than one module, each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []
    counter = 0

    for root in sorted(graph):
        if root in index:
            continue
        # Iterative DFS: each frame is a node and the iterator over its successors.
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        frames = [(root, iter(sorted(graph[root])))]
        while frames:
            node, successors = frames[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    frames.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            frames.pop()
            if frames:
                parent = frames[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(tuple(sorted(component)))
    return sorted(found)


def _describe(component: tuple[str, ...], graph: dict[str, set[str]]) -> str:
    members = set(component)
    edges = [
        f"    {source} -> {target}"
        for source in component
        for target in sorted(graph[source] & members)
    ]
    return "\n".join([" <-> ".join(component), *edges])


def test_the_cycle_finder_sees_a_lazy_two_module_cycle() -> None:
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"d"}}
    assert strongly_connected(graph) == [("a", "b")]


def test_from_import_of_a_submodule_is_an_edge_to_that_submodule() -> None:
    tree = ast.parse("def f():\n    from . import entry\n    from .position import Position\n")
    modules = {"broker.ledger", "broker.ledger.entry", "broker.ledger.position"}
    names = _imported_names(tree, "broker.ledger.managed_ledger", False, modules)
    assert {_resolve(name, modules) for name in names} == {
        "broker.ledger.entry",
        "broker.ledger.position",
    }


def test_from_package_import_of_an_attribute_is_an_edge_to_the_package_init() -> None:
    tree = ast.parse("from storage_stub.bookie import Bookie\n")
    modules = {"storage_stub.bookie", "storage_stub.bookie.api"}
    names = set(_imported_names(tree, "broker.cluster", False, modules))
    assert names == {"storage_stub.bookie"}


def test_every_import_statement_is_found_at_any_depth_and_over_several_lines() -> None:
    source = '''"""Reads from the cache import queue,
from the ledger.
import this
"""
import a.b, c
from d import (
    e,
    f,  # (a comment)
)
from g \\
    import h


class K:
    def m(self) -> None:
        if True:
            try:
                from .. import n
            except ImportError:
                import o as p
x = "import q"
'''
    found = [ast.unparse(statement) for statement in import_statements(source).body]
    assert found == [
        "import this",  # a docstring line that parses: an edge too many at most
        "import a.b, c",
        "from d import e, f",
        "from g import h",
        "from .. import n",
        "import o as p",
    ]


def test_no_import_cycles_between_modules() -> None:
    graph = import_graph()
    cycles = strongly_connected(graph)
    unexpected = [c for c in cycles if c not in ALLOWED_CYCLES]
    fixed = [c for c in ALLOWED_CYCLES if c not in cycles]
    message = []
    if unexpected:
        message.append("import cycles (lazy imports count):")
        message.extend(_describe(c, graph) for c in unexpected)
    if fixed:
        message.append("allowed cycles that no longer exist; remove them from ALLOWED_CYCLES:")
        message.extend("    " + " <-> ".join(c) for c in fixed)
    assert not message, "\n".join(message)
