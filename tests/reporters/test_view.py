"""The cut explorer, tested as a person uses it: the page ``map --html`` writes is opened
in a real headless Chromium and asserted on after its script ran (boundaries, which are
legal, the crossing set a click shows, the plan and imbalance after a cut is edited); the
widget carries the same document and script.

Browser tests need playwright and a Chromium (``/usr/bin/chromium``, never downloaded):
locally they skip with the reason when either is missing; under ``CI=true`` that is a
failure. Screenshots go to ``tests/artifacts/`` (not committed).
"""

from __future__ import annotations

import ast
import json
import math
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from graphcheck.planning.balance import balance, imbalance, stage_costs
from graphcheck.report import Report, render
from graphcheck.reporters.view import CutView, page, script

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
MODEL = "fixtures/violations.py:collected_outputs"  # 8 layers, boundaries 2..7 GC201
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def _chromium() -> str:
    """The Chromium executable, or skip (fail under ``CI=true``) saying what is missing."""
    missing = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = "playwright is not installed (pip install -e '.[dev]')"
    found = next((p for p in CHROMIUM if os.access(p, os.X_OK)), shutil.which("chromium"))
    if missing is None and found is None:
        missing = "no Chromium at /usr/bin/chromium (apt-get install -y chromium)"
    if missing is None:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail(f"browser test under CI: {missing}")
    pytest.skip(f"browser test skipped: {missing}")


@pytest.fixture(scope="module")
def browser():
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


def _open(browser, path: Path):
    """A page on ``path`` that records script errors and every request it makes."""
    tab = browser.new_page(viewport={"width": 1200, "height": 800})
    tab.errors, tab.requests = [], []
    tab.on("pageerror", lambda err: tab.errors.append(str(err)))
    tab.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
    tab.on("request", lambda r: tab.requests.append(r.url))
    tab.goto(path.as_uri())
    return tab


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """``graphcheck map MODEL --html FILE --format json``: the page and the map's JSON."""
    from graphcheck.cli import main

    path = tmp_path_factory.mktemp("view") / "cut-map.html"
    out = tmp_path_factory.mktemp("view") / "map.json"
    code = main(["map", MODEL, "--html", str(path), "--format", "json", "--output", str(out)])
    report = json.loads(out.read_text())
    return code, path, report


@pytest.fixture(scope="module")
def explorer():
    from graphcheck.api import Explorer

    return Explorer(MODEL)


def _data(path: Path) -> dict:
    text = path.read_text()
    start = text.index('id="graphcheck-data">') + len('id="graphcheck-data">')
    return json.loads(text[start : text.index("</script>", start)])


def test_page_shows_the_map_as_the_report_judges_it(browser, written):
    code, path, report = written
    assert code == 1 and report["mode"] == "map"
    assert not [d for d in report["diagnostics"] if d["cut"] is None and d["severity"] == "error"]
    legal = [c["position"] for c in report["cuts"] if c["verdict"] == "pass"]
    assert legal == [0, 1, 8]  # as Explorer.map().legal_cuts(): the slow explore test
    tab = _open(browser, path)
    boundaries = tab.locator(".gc-boundary")
    assert boundaries.count() == report["num_layers"] + 1 == 9
    assert [int(b) for b in tab.eval_on_selector_all(
        ".gc-boundary.legal", "els => els.map(e => e.dataset.position)")] == legal  # fmt: skip
    assert "GC201" in tab.get_attribute('.gc-boundary[data-position="4"]', "title")
    kinds = tab.eval_on_selector_all(
        ".gc-layer[data-index] .gc-kind", "e => e.map(x => x.textContent)"
    )
    assert kinds[0].endswith("special") and kinds[3] == kinds[7] == "window 17 · dense"
    assert kinds[1] == "full attention · dense"
    assert "layer_norm" in tab.get_attribute('.gc-layer[data-index="0"]', "title")
    assert tab.errors == [] and all(u.startswith(("file:", "data:")) for u in tab.requests)


def test_click_shows_the_crossing_set_and_edits_the_plan(browser, written):
    _, path, report = written
    data = _data(path)
    first, last = data["first"], data["last"]
    layers = [layer["cost"] for layer in data["layers"]]
    best = balance(layers, 4, [0, 1, 8], first, last)
    tab = _open(browser, path)
    assert tab.get_attribute(".gc-verdict", "data-cuts") == ",".join(map(str, best.cuts))
    assert "legal" in tab.get_attribute(".gc-verdict", "class").split()

    tab.click('.gc-boundary[data-position="3"]')  # shows boundary 3 and cuts there too
    rows = tab.eval_on_selector_all(
        ".gc-crossing tbody tr", "r => r.map(x => x.cells[0].textContent)"
    )
    assert rows == [c["node"] for c in report["cuts"][3]["crossing"]]
    assert "fixtures/reference.py:" in tab.inner_text(
        ".gc-crossing tbody tr:first-child .gc-source"
    )
    cuts = sorted({*best.cuts, 3})
    assert tab.get_attribute(".gc-verdict", "data-cuts") == ",".join(map(str, cuts))
    assert "illegal" in tab.get_attribute(".gc-verdict", "class").split()
    assert "3" in tab.inner_text(".gc-verdict") and "GC201" in tab.inner_text(".gc-crossing h3")
    shown = [
        float(c)
        for c in tab.eval_on_selector_all(".gc-stage-cost", "e => e.map(x => x.dataset.cost)")
    ]
    assert shown == pytest.approx(stage_costs(layers, cuts, first, last))
    ratio = float(tab.get_attribute(".gc-imbalance", "data-imbalance"))
    assert ratio == pytest.approx(imbalance(stage_costs(layers, cuts, first, last)))
    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / "cut_map.png"), full_page=True)

    tab.click('.gc-boundary[data-position="3"]')  # removed again: the legal plan is back
    assert tab.get_attribute(".gc-verdict", "data-cuts") == ",".join(map(str, best.cuts))
    tab.select_option(".gc-stages-select", "2")
    assert tab.get_attribute(".gc-verdict", "data-cuts") == ",".join(
        map(str, balance(layers, 2, [0, 1, 8], first, last).cuts)
    )
    assert tab.errors == []


def _as_dict(found) -> dict | None:
    return None if found is None else found.as_dict()


def _synthetic(num_layers: int) -> dict:
    """A view document of ``num_layers`` layers, every third boundary illegal (no export)."""
    layers = [float(1 + i % 4) for i in range(num_layers)]
    legal = [k for k in range(num_layers + 1) if k % 3]
    offered = range(1, min(8, num_layers + 2) + 1)
    return {
        "model": "m</script><!--x", "num_layers": num_layers, "metric": "flops",
        "unit": "FLOPs per token", "doc_length": 4096, "whole_program": [],
        "boundaries": [{"position": k, "legal": k in legal, "bytes_per_token": 128,
                        "codes": [] if k in legal else ["GC201"], "crossing": []}
                       for k in range(num_layers + 1)],
        "layers": [{"index": i, "cost": c, "label": "dense", "differs": [], "params": 0, "flops": c}
                   for i, c in enumerate(layers)],
        "first": 1.0, "last": 2.0, "stages": min(8, num_layers), "virtual": 1,
        "plans": {str(s): _as_dict(balance(layers, s, legal, 1.0, 2.0)) for s in offered},
        "blind": {str(s): _as_dict(balance(layers, s, None, 1.0, 2.0)) for s in offered},
    }  # fmt: skip


def test_rejudging_a_94_layer_plan_takes_well_under_100_ms(browser, tmp_path):
    data = _synthetic(94)
    path = tmp_path / "page.html"
    path.write_text(render(CutView(data), "html"))
    tab = _open(browser, path)
    assert tab.locator(".gc-boundary").count() == 95
    assert tab.inner_text("h2").startswith("m</script><!--x · 94 layers")  # inlined safely
    per_click = tab.evaluate(
        """() => { const t0 = performance.now();
          for (let i = 1; i <= 40; i++)
            document.querySelector(`.gc-boundary[data-position="${i}"]`).click();
          return (performance.now() - t0) / 40; }"""
    )
    print(f"re-judging a 94-layer plan (click to redrawn page): {per_click:.2f} ms")
    assert per_click < 50
    assert tab.errors == []


def test_html_format_is_for_map_and_plan(cli, tmp_path):
    code, out, err = cli(
        "verify", "fixtures/reference.py:reference", "--cuts", "4", "--format", "html"
    )
    assert (code, out) == (2, "") and "use it with graphcheck map or plan" in err
    assert len(err.strip().splitlines()) == 1
    code, out, err = cli("map", "no/such/model.py:f", "--html", tmp_path / "missing" / "x.html")
    assert code == 2 and "does not exist; create it first" in err and "missing" in err
    with pytest.raises(Exception, match="use it with graphcheck map or plan"):
        render(Report(model="m.py:f", num_layers=2, mode="verify"), "html")


def test_page_is_self_contained():
    text = page(_synthetic(4))
    assert "export default { render }" in text and script().strip()[:40] in text
    assert "http://" not in text and "https://" not in text and "<script src" not in text
    assert text.count("</script>") == 2  # the data element and the module: nothing inlined ends one


def test_importing_graphcheck_does_not_import_anywidget():
    """Only the widget module names anywidget, and only inside a function."""
    package = ROOT / "graphcheck"
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        names = {a.name for n in top for a in n.names} | {
            n.module for n in top if isinstance(n, ast.ImportFrom)
        }
        assert "anywidget" not in names, path


def test_importing_graphcheck_leaves_anywidget_unloaded():
    code = "import sys, graphcheck; graphcheck.explore; print('anywidget' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_widget_is_drawn_by_the_pages_script(written):
    pytest.importorskip(
        "anywidget", reason="the notebook extra: pip install 'graphcheck[notebook]'"
    )
    import graphcheck
    from graphcheck.reporters.view.widget import widget

    data = _data(written[1])
    shown = widget(data)
    assert shown._esm == script() and shown.data == data
    with pytest.raises(graphcheck.UsageError, match="--cost"):
        graphcheck.explore(MODEL, 3, cost="bytes")  # before any export


def test_explore_carries_the_maps_verdicts_and_plans(explorer):
    pytest.importorskip(
        "anywidget", reason="the notebook extra: pip install 'graphcheck[notebook]'"
    )
    import graphcheck

    widget = graphcheck.explore(explorer, 3)
    assert widget._esm == script() and widget.data["num_layers"] == 8
    assert [
        b["position"] for b in widget.data["boundaries"] if b["legal"]
    ] == explorer.map().legal_cuts()
    assert widget.data["plans"]["3"]["cuts"] == list(
        balance([x["cost"] for x in widget.data["layers"]], 3, [0, 1, 8],
                widget.data["first"], widget.data["last"]).cuts
    )  # fmt: skip
    total = sum(x["cost"] for x in widget.data["layers"]) + widget.data["first"]
    assert math.isclose(sum(widget.data["plans"]["3"]["stage_costs"]), total + widget.data["last"])
    with pytest.raises(graphcheck.UsageError, match="--cost"):
        graphcheck.explore(explorer, 3, cost="bytes")


def test_wheel_ships_the_script_and_style(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, cwd=tmp_path,
    )  # fmt: skip
    names = set(zipfile.ZipFile(next(tmp_path.glob("graphcheck-*.whl"))).namelist())
    for asset in ("cut_map.js", "cut_map.css", "__init__.py", "widget.py"):
        assert f"graphcheck/reporters/view/{asset}" in names


def test_example_notebook_runs_and_holds_the_widget_state():
    pytest.importorskip(
        "anywidget", reason="the notebook extra: pip install 'graphcheck[notebook]'"
    )
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    notebook = nbformat.read(ROOT / "examples" / "cut_explorer.ipynb", as_version=4)
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "examples")}},
    )  # fmt: skip
    client.execute()
    ARTIFACTS.mkdir(exist_ok=True)  # the documentation site renders the notebook as run here
    nbformat.write(notebook, ARTIFACTS / "cut_explorer.ipynb")
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "legal cuts: [0, 1, 8]" in text and "boundary 3: fail ['GC201']" in text
    assert "plan: --cuts 0,1,8" in text
    states = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    (widget,) = [s["state"] for s in states.values() if "data" in s["state"]]
    data = widget["data"]
    assert widget["_esm"] == script()
    assert [b["position"] for b in data["boundaries"] if b["legal"]] == [0, 1, 8]
    assert data["stages"] == 4 and data["plans"]["4"]["cuts"] == [0, 1, 8]
    assert data["layers"][3]["label"] == "window 17 · dense"
