"""Every module of graphcheck declares ``__all__``, and the list is accurate.

* each module (``graphcheck.__main__`` aside: running it runs the command line) has
  an ``__all__`` of distinct strings;
* every entry names something the module has;
* every public name another module imports from a graphcheck module (``from
  graphcheck.x import name``, in the package, the tests, the benchmarks and the
  scripts) is in that module's ``__all__``: the list is the module's interface.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "graphcheck"
IMPORTERS = ("graphcheck", "tests", "benchmarks", "scripts")


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(
    name for name in map(_name, PACKAGE.rglob("*.py")) if name != "graphcheck.__main__"
)


@pytest.mark.parametrize("name", MODULES)
def test_all_names_what_the_module_has(name: str):
    module = importlib.import_module(name)
    names = getattr(module, "__all__", None)
    assert names is not None, f"{name} has no __all__"
    assert all(isinstance(n, str) for n in names), f"{name}.__all__ holds a non-string"
    assert len(set(names)) == len(names), f"{name}.__all__ lists a name twice"
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ lists names the module does not have: {missing}"


def _imports(path: Path):
    """``(module, name, line)`` of every ``from graphcheck... import name`` in ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module.split(".")[0] == "graphcheck":
            yield from ((node.module, a.name, node.lineno) for a in node.names)


def _is_public(module: ModuleType, name: str) -> bool:
    """A public name that is not a submodule (``from graphcheck.analysis import optable``)."""
    return not name.startswith("_") and not isinstance(getattr(module, name, None), ModuleType)


def test_all_lists_every_imported_name():
    unlisted = []
    for folder in IMPORTERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for target, name, line in _imports(path):
                module = importlib.import_module(target)
                if _is_public(module, name) and name not in getattr(module, "__all__", ()):
                    unlisted.append(f"{path.relative_to(ROOT)}:{line} {target}.{name}")
    assert not unlisted, "imported but not in the module's __all__:\n" + "\n".join(unlisted)
