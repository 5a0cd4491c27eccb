"""The Model Explorer overlay (``--model-explorer DIR``) against Model Explorer's own adapter.

The ``.pt2`` the overlay writes is loaded and converted by Model Explorer's PyTorch
adapter in the test; every node id of every node-data file must be a node of the graph
it builds, and the values must be the proof's: the stage of each layer's nodes, the
crossing values of each cut, the node a GC201 finding names. Without
``ai-edge-model-explorer`` the adapter tests skip with the reason shown; under
``CI=true`` they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import reference
import violations

from graphcheck.analysis.regions import RegionKind
from graphcheck.api import Explorer
from graphcheck.errors import UsageError
from graphcheck.interop.model_explorer import GRAPH_ID, OverlayFile, write_overlay

ROOT = Path(__file__).resolve().parents[2]


def _adapter():
    try:
        from graphcheck.interop.model_explorer import adapter

        adapter.require()
    except UsageError as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {err}")
        pytest.skip(str(err))
    return adapter


def _small(decoder=None):
    config = reference.Config(num_hidden_layers=4)
    if decoder is None:
        return reference.CausalLM(config)
    return violations._lm(decoder, config)


@pytest.fixture(scope="module")
def skip_explorer():
    return Explorer(lambda: _small(violations.SkipDecoder))


def _results(folder: Path, name: OverlayFile) -> dict[str, dict]:
    data = json.loads((folder / name).read_text())
    assert list(data) == [GRAPH_ID]
    return data[GRAPH_ID]["results"]


def _adapter_ids(folder: Path) -> set[str]:
    graphs = _adapter().adapter_graphs(str(folder / OverlayFile.PROGRAM))
    return {node.id for node in graphs["graphs"][0].nodes}


def _check_ids(folder: Path, files: tuple[OverlayFile, ...]) -> set[str]:
    ids = _adapter_ids(folder)
    for name in files:
        missing = set(_results(folder, name)) - ids
        assert not missing, f"{name}: node ids the adapter's graph lacks: {sorted(missing)[:5]}"
    return ids


def test_verify_overlay_matches_the_adapter_graph(skip_explorer, tmp_path):
    report = skip_explorer.verify([2])
    ctx = skip_explorer.context(skip_explorer.plan([2]))
    write_overlay(str(tmp_path), skip_explorer.program, report, ctx)
    files = (OverlayFile.STAGES, OverlayFile.CROSSING, OverlayFile.FINDINGS)
    ids = _check_ids(tmp_path, files)
    program = skip_explorer.program
    assert ids == {n.name for n in program.graph.nodes}
    stages = _results(tmp_path, OverlayFile.STAGES)
    for node, region in program.region.items():
        if region.kind == RegionKind.LAYER:
            assert stages[node.name]["value"] == (0 if region.layer < 2 else 1), node.name
    findings = _results(tmp_path, OverlayFile.FINDINGS)
    assert report.codes == {"GC201"}
    assert findings == {"embedding": {"value": "GC201 @ cut 2", "bgColor": "#e41a1c"}}
    crossing = _results(tmp_path, OverlayFile.CROSSING)
    assert crossing["embedding"]["value"] == "activation @ 2"
    assert sum("activation" in r["value"] for r in crossing.values()) == 2
    manifest = json.loads((tmp_path / OverlayFile.MANIFEST).read_text())
    assert manifest["verdict"] == "fail" and manifest["unplaced_findings"] == []


def test_map_overlay_marks_every_boundary(skip_explorer, tmp_path):
    report = skip_explorer.map()
    write_overlay(str(tmp_path), skip_explorer.program, report)
    assert not (tmp_path / OverlayFile.STAGES).exists()
    _check_ids(tmp_path, (OverlayFile.LAYERS, OverlayFile.CROSSING, OverlayFile.FINDINGS))
    layers = _results(tmp_path, OverlayFile.LAYERS)
    assert {r["value"] for r in layers.values()} == {-1, 0, 1, 2, 3, 4}
    findings = _results(tmp_path, OverlayFile.FINDINGS)
    assert findings["embedding"]["value"] == "GC201 @ cut 1; GC201 @ cut 2"
    assert sorted(d.cut for d in report.diagnostics if d.code == "GC201") == [1, 2, 3]
    for d in report.diagnostics:  # boundary 3 carries 0.1 * x0, computed before it
        assert f"GC201 @ cut {d.cut}" in findings[d.node]["value"]
    crossing = _results(tmp_path, OverlayFile.CROSSING)
    assert crossing["embedding"]["value"] == "activation @ 0-2"


def test_passing_plan_has_no_findings_and_one_activation(tmp_path):
    explorer = Explorer(lambda: _small())
    report = explorer.verify([2])
    write_overlay(str(tmp_path), explorer.program, report, explorer.context(explorer.plan([2])))
    assert report.verdict == "pass"
    assert _results(tmp_path, OverlayFile.FINDINGS) == {}
    crossing = _results(tmp_path, OverlayFile.CROSSING)
    assert [n for n, r in crossing.items() if "activation" in r["value"]] == [
        report.cut(2).state["node"]
    ]
    assert set(crossing) <= {n.name for n in explorer.program.graph.nodes}


@pytest.mark.parametrize("make", ["missing-parent", "a-file"])
def test_bad_folder_is_one_line_before_any_export(cli, tmp_path, make):
    target = tmp_path / "nope" / "dir" if make == "missing-parent" else tmp_path / "file"
    if make == "a-file":
        target.write_text("")
    code, out, err = cli("map", "no/such/model.py:f", "--model-explorer", target)
    assert code == 2 and out == ""
    assert err.startswith("graphcheck: error: --model-explorer") and err.count("\n") == 1


def test_opening_without_model_explorer_names_the_extra(monkeypatch):
    from graphcheck.interop.model_explorer import adapter

    monkeypatch.setitem(sys.modules, "model_explorer", None)
    with pytest.raises(UsageError, match=r"pip install 'graphcheck\[explorer\]'"):
        adapter.require()


def test_cli_overlay_loads_in_a_fresh_process(cli, tmp_path):
    """The command line writes the overlay; a new process (no op registered by an export)
    loads it with the adapter, as ``python -m graphcheck.interop.model_explorer`` does."""
    _adapter()
    folder = tmp_path / "overlay"
    code, out, _ = cli(
        "verify", ROOT / "fixtures/violations.py:skip_connection", "--cuts", "4",
        "--model-explorer", folder, "--format", "json",
    )  # fmt: skip
    assert code == 1 and json.loads(out)["verdict"] == "fail"
    script = (
        "import json, sys; from graphcheck.interop.model_explorer.adapter import adapter_graphs;"
        "g = adapter_graphs(sys.argv[1]); print(json.dumps([n.id for n in g['graphs'][0].nodes]))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(folder / OverlayFile.PROGRAM)],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    ids = set(json.loads(run.stdout.strip().splitlines()[-1]))
    for name in (OverlayFile.STAGES, OverlayFile.CROSSING, OverlayFile.FINDINGS):
        assert set(_results(folder, name)) <= ids, name
    assert _results(folder, OverlayFile.FINDINGS)["embedding"]["value"] == "GC201 @ cut 4"
