"""Results are plain data: a report holds no program, reads back from its JSON, renders
through one seam; the rooms that moved keep their old names for a release."""

from __future__ import annotations

import dataclasses
import importlib
import pickle

import pytest
import torch.fx
from harness import cut_map, verify

from graphcheck.planning.syntax import PLAN_ERROR
from graphcheck.project.commands import CHECK_FORMATS
from graphcheck.report import formats, renders
from graphcheck.results.values import CrossingValue, Role
from graphcheck.rules import gc101_stage_plan_invalid as gc101


def _graph_objects(value, path: str = "report") -> list[str]:
    """Where ``value`` (dataclasses, lists, dicts) holds an FX node or graph."""
    if isinstance(value, torch.fx.Node | torch.fx.Graph | torch.fx.GraphModule):
        return [path]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return [
            p for f in fields for p in _graph_objects(getattr(value, f.name), f"{path}.{f.name}")
        ]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _graph_objects(v, f"{path}[{k!r}]")]
    if isinstance(value, list | tuple | set):
        return [p for i, v in enumerate(value) for p in _graph_objects(v, f"{path}[{i}]")]
    return []


def test_a_verify_report_holds_no_graph_and_pickles():
    report = verify("reference:reference", (4,))
    assert report.cut(4).crossing, "the cut carries values"
    assert _graph_objects(report) == []
    again = pickle.loads(pickle.dumps(report))
    assert again.as_dict() == report.as_dict()


def test_a_crossing_set_reads_back_from_the_reports_json():
    report = cut_map("violations:skip_connection")
    for cut in report.as_dict()["cuts"]:
        values = [CrossingValue.from_dict(d) for d in cut["crossing"]]
        kept = report.cut(cut["position"]).crossing
        assert values == [dataclasses.replace(v, source=None) for v in kept]
    roles = {v.role for c in report.cuts for v in c.crossing}
    assert Role.ACTIVATION in roles and all(isinstance(r, Role) for r in roles)


def test_each_crossing_value_knows_the_model_line_that_makes_it():
    (residual,) = [
        v for v in verify("reference:reference", (4,)).cut(4).crossing if v.role == "activation"
    ]
    assert residual.source is not None and residual.source.startswith("fixtures/reference.py:")


def test_a_crossing_values_node_is_its_name_and_the_old_spelling_warns():
    (value, *_) = verify("reference:reference", (4,)).cut(4).crossing
    assert isinstance(value.node, str) and value.node == value.as_dict()["node"]
    with pytest.warns(DeprecationWarning, match="use value.node, not value.node.name"):
        assert value.node.name == value.node


def test_check_renders_in_the_formats_whose_reporters_say_so():
    assert list(CHECK_FORMATS) == [f for f in formats() if renders(f, "check")]
    assert [f for f in formats() if renders(f, "map")] == [
        "html",
        "json",
        "markdown",
        "sarif",
        "text",
    ]


def test_a_malformed_plan_names_the_rule_of_plans():
    assert f"{gc101.CODE} {gc101.NAME}" == PLAN_ERROR


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("graphcheck.gate.report", "GateReport", "graphcheck.results.gate"),
        (
            "graphcheck.reporters.model_explorer",
            "write_overlay",
            "graphcheck.interop.model_explorer",
        ),
    ],
)
def test_moved_modules_keep_their_old_names_with_a_warning(old, name, new):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"moved to {new}.{name}"):
        found = getattr(module, name)
    assert found is getattr(importlib.import_module(new), name)
