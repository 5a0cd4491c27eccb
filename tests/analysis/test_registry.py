"""The op registry: keyed by op, one module per family, old module paths kept as
deprecated aliases."""

from __future__ import annotations

import ast
import importlib
import operator
import sys
from pathlib import Path

import pytest
import torch

from graphcheck.analysis.locality import custom
from graphcheck.analysis.locality.registry import entries, find, find_name
from graphcheck.analysis.locality.transfer import FAMILIES, lookup

ROOT = Path(__file__).resolve().parents[2]
ALIASES = [
    "graphcheck.analysis.obligations",
    "graphcheck.analysis.optable",
    "graphcheck.analysis.optable_groups",
    "graphcheck.analysis.optable_hop",
    "graphcheck.analysis.optable_mixers",
    "graphcheck.analysis.optable_onehot",
    "graphcheck.analysis.transfer",
]


def test_ops_are_keyed_by_overload_and_callable():
    aten = torch.ops.aten
    assert lookup(aten.add.Tensor) is lookup(aten.sub.Tensor) is not None
    assert lookup(operator.getitem).__name__ == "getitem"
    assert lookup(torch.sym_max) is lookup(operator.add) is not None
    assert lookup(aten.add_.Tensor) is None  # the in-place twin is the dispatch's rule
    assert find_name("aten.add.Tensor").key is aten.add.Tensor


def test_an_op_of_a_namespace_loaded_later_resolves_by_its_qualified_name():
    import graphcheck.kernels.custom_ops  # noqa: F401  (defines the graphcheck:: ops)

    op = torch.ops.graphcheck.varlen_attention.default
    assert lookup(op) is custom.custom
    assert find(op).name == "graphcheck.varlen_attention.default"


def test_every_family_module_lists_its_transfer_functions():
    families = {module.__name__.rpartition(".")[2]: module for module in FAMILIES}
    for entry in entries():
        module = families[entry.family]
        assert entry.fn.__name__ in module.__all__, (entry.family, entry.fn.__name__)
        assert module.__doc__, entry.family


@pytest.mark.parametrize("name", ALIASES)
def test_old_module_paths_warn_and_re_export(name):
    sys.modules.pop(name, None)
    with pytest.warns(DeprecationWarning, match=name.replace(".", r"\.")):
        module = importlib.import_module(name)
    assert module.__all__ and all(hasattr(module, n) for n in module.__all__)


def test_the_package_does_not_import_the_aliases():
    found = []
    for path in sorted((ROOT / "graphcheck").rglob("*.py")):
        if path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".") in ALIASES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                named = {f"{node.module}.{a.name}" for a in node.names} | {node.module}
                found += [f"{path.relative_to(ROOT)}: {n}" for n in named & set(ALIASES)]
    assert not found, found
