"""Adding a packed-varlen input is one row of :data:`graphcheck.varlen.INPUTS`.

With an extra row patched into the table, the export takes the input (symbolic dim,
readable symbol, example value), the taint pass starts it from the row's taint, the
locality pass from the row's structure, and GC403 checks the row's dim. And no module
of graphcheck but ``varlen.py`` spells a table of the inputs.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from graphcheck import varlen
from graphcheck.analysis.export import export_model
from graphcheck.analysis.program import analyse
from graphcheck.model.layout import detect_layout
from graphcheck.model.load import build_fake, fake_mode
from graphcheck.results.values import Role
from graphcheck.rules import gc403_shape_specialized
from graphcheck.varlen import Structure, Taint, VarlenInput

PACKAGE = Path(__file__).resolve().parents[2] / "graphcheck"

# A second set of document boundaries, [N + 1] like cu_seq_lens_q.
EXTRA = VarlenInput("doc_bounds", 0, "N1", "N+1", "int32", Taint.DOCS, Structure.BOUNDARIES)

# Collections of input names outside varlen.py that are not the table: the argument
# names of varlen kernels (they share the inputs' names, transformers passes them down).
KERNEL_ARGUMENTS = {
    ("analysis/locality/custom.py", "_STRUCTURE_ARGS"),
    ("analysis/locality/custom.py", "_SIZES"),
}


class _Tiny(nn.Module):
    """Two layers; adds the last document boundary to the residual when ``absolute``,
    asserts the number of documents when ``specialise``."""

    def __init__(self, absolute: bool = False, specialise: bool = False) -> None:
        super().__init__()
        self.absolute, self.specialise = absolute, specialise
        self.embed_tokens = nn.Embedding(16, 8)
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])
        self.norm = nn.LayerNorm(8)
        self.lm_head = nn.Linear(8, 16)

    def forward(self, input_ids, position_ids, doc_bounds):
        if self.specialise:
            torch._check(doc_bounds.shape[0] == 4)
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = h + layer(h)
        if self.absolute:
            h = h + doc_bounds[-1].to(h.dtype)
        return self.lm_head(self.norm(h))


@pytest.fixture
def extra_row(monkeypatch):
    monkeypatch.setattr(varlen, "INPUTS", (*varlen.INPUTS, EXTRA))
    monkeypatch.setitem(varlen.BY_NAME, EXTRA.name, EXTRA)


def _program(**options):
    mode = fake_mode()
    model = build_fake(lambda: _Tiny(**options), mode)
    return analyse(export_model(model, mode), detect_layout(model))


@pytest.mark.usefixtures("extra_row")
def test_a_new_row_is_exported_and_tainted():
    assert varlen.model_inputs()[-1] == "doc_bounds"
    assert varlen.stage_inputs("hidden")[-1] == "doc_bounds"
    program = _program()
    assert program.exported.inputs == ("input_ids", "position_ids", "doc_bounds")
    node = program.user_inputs["doc_bounds"]
    assert program.shape(node) == ["N+1"]
    assert program.taint[node] == Taint.DOCS
    assert program.role[node] == Role.REPLICATED
    assert gc403_shape_specialized.check(SimpleNamespace(program=program, lengths=None)) == []


@pytest.mark.usefixtures("extra_row")
def test_a_new_row_starts_the_locality_pass_from_its_structure():
    program = _program(absolute=True)
    node = program.user_inputs["doc_bounds"]
    assert program.fabricated.get(node) == "doc_bounds used as a value"


@pytest.mark.usefixtures("extra_row")
def test_gc403_checks_a_new_rows_dim():
    program = _program(specialise=True)
    messages = [
        d.message
        for d in gc403_shape_specialized.check(SimpleNamespace(program=program, lengths=None))
    ]
    assert any(m.startswith("doc_bounds became 4") for m in messages), messages


def _tables(tree: ast.Module):
    """(assigned name, string constants) of every collection literal in ``tree``."""
    for stmt in tree.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) else getattr(stmt, "target", None)
        name = target.id if isinstance(target, ast.Name) else None
        for node in ast.walk(stmt):
            elts = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
            if isinstance(node, (ast.Dict, ast.Set, ast.List, ast.Tuple)) and elts:
                yield name, [e.value for e in elts if isinstance(e, ast.Constant)]


def test_no_other_module_spells_the_table():
    names = set(varlen.BY_NAME)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where == "varlen.py":
            continue
        for name, values in _tables(ast.parse(path.read_text())):
            spelled = [v for v in values if v in names]
            if len(spelled) >= 2 and (where, name) not in KERNEL_ARGUMENTS:
                found.append(f"{where}: {name or '?'} {spelled}")
    assert not found, "tables of the varlen inputs outside graphcheck/varlen.py:\n" + "\n".join(
        found
    )
