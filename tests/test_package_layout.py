"""The package's shape: each pipeline is one folder, imports flow one way, no cycles.

Every ``import`` in ``graphcheck/`` (at module level or inside a function, but not
under ``if TYPE_CHECKING:``) is read from the source; a module may import only
from its own layer or a layer before it in the data flow, and the graph of
module imports has no cycle.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "graphcheck"

# The data flow, first to last: a module imports only from its layer or earlier ones.
LAYERS = (
    (
        "graphcheck._version",
        "graphcheck.errors",
        "graphcheck.varlen",
        "graphcheck.diagnostics",
        "graphcheck.phases",
    ),
    ("graphcheck.results", "graphcheck.planning", "graphcheck.schemas"),
    ("graphcheck.cache",),
    ("graphcheck.kernels",),
    ("graphcheck.model", "graphcheck.options"),
    ("graphcheck.analysis",),
    ("graphcheck.stages",),
    ("graphcheck.rules",),
    ("graphcheck.checker",),
    ("graphcheck.report", "graphcheck.reporters"),
    ("graphcheck.interop",),
    ("graphcheck.api",),
    ("graphcheck.gate",),
    ("graphcheck.project",),
    ("graphcheck.cli", "graphcheck.pytest_plugin", "graphcheck.console", "graphcheck.commands"),
    ("graphcheck", "graphcheck.__main__"),
)
TOP_LEVEL = {
    "__init__.py", "__main__.py", "_version.py", "api.py", "checker.py", "cli.py",
    "diagnostics.py", "errors.py", "options.py", "phases.py", "pytest_plugin.py", "report.py",
    "varlen.py",
}  # fmt: skip
FOLDERS = {
    "analysis", "cache", "commands", "console", "gate", "interop", "kernels", "model", "planning",
    "project", "reporters", "results", "rules", "schemas", "stages",
}  # fmt: skip


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test)


def _imports(path: Path, known: set[str], typing: bool = False) -> set[str]:
    """The graphcheck modules ``path`` imports (``from pkg import mod`` names ``pkg.mod``),
    those under ``if TYPE_CHECKING:`` too when ``typing``; ``known`` empty: every module
    named, graphcheck's or not."""
    found: set[str] = set()
    stack = [ast.parse(path.read_text(encoding="utf-8"))]
    while stack:
        node = stack.pop()
        if _type_checking(node) and not typing:
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            found |= (subs & known) or {node.module}
    return {name for name in found if name in known} if known else found


def _layer(module: str) -> int:
    best = max(
        (prefix for layer in LAYERS for prefix in layer
         if module == prefix or module.startswith(prefix + ".")),
        key=len,
    )  # fmt: skip
    return next(i for i, layer in enumerate(LAYERS) if best in layer)


@functools.cache
def _graph() -> nx.DiGraph:
    """The import graph of the package (parsed once per session; callers only read it)."""
    modules = _modules()
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for target in _imports(path, set(modules)):
            if target != name and not name.startswith(target + "."):  # a package's own parent
                graph.add_edge(name, target)
    return graph


def test_top_level_holds_only_entry_points_and_contracts():
    files = {p.name for p in PACKAGE.glob("*.py")}
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert files == TOP_LEVEL
    assert folders == FOLDERS


@pytest.mark.parametrize("module", sorted(_modules()))
def test_imports_flow_one_way(module):
    graph = _graph()
    upward = [t for t in graph.successors(module) if _layer(t) > _layer(module)]
    assert not upward, f"{module} imports from later layers: {upward}"


def test_no_import_cycle():
    cycles = list(nx.simple_cycles(_graph()))
    assert not cycles, f"import cycles: {cycles[:5]}"


# The output rooms: plain data in, text out. They import nothing that computes a result
# (the gate, the api, the analysis), not under TYPE_CHECKING either, and no torch: a
# result is data a reporter renders without the program it came from.
OUTPUT = ("graphcheck.report", "graphcheck.reporters", "graphcheck.results", "graphcheck.console")
COMPUTES = ("graphcheck.gate", "graphcheck.api", "graphcheck.analysis", "torch")


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize(
    "module", sorted(m for m in _modules() if _within(m, OUTPUT))
)  # fmt: skip
def test_output_modules_import_nothing_that_computes(module):
    found = _imports(_modules()[module], set(), typing=True)
    assert not [name for name in found if _within(name, COMPUTES)], sorted(found)


def test_the_output_rule_sees_typing_imports(tmp_path):
    """The rule above reads ``if TYPE_CHECKING:`` imports and function-level ones."""
    path = tmp_path / "m.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from graphcheck.api import x\n"
        "def f():\n    import torch.fx\n"
    )
    assert {"graphcheck.api", "torch.fx"} <= _imports(path, set(), typing=True)


def test_the_walk_sees_imports():
    """The test above would pass on a walk that finds nothing: it does find the edges."""
    graph = _graph()
    assert graph.has_edge("graphcheck.api", "graphcheck.checker")
    assert graph.has_edge("graphcheck.commands.verify", "graphcheck.report")  # in a function
    assert not graph.has_edge("graphcheck.reporters.text", "graphcheck.results.gate")  # typing
