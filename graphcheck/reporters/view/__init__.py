"""The cut explorer's view: one JSON document and one script that draws it.

:func:`document` reads everything the view shows from an explorer (an
:class:`graphcheck.api.Explorer`, or anything with its ``map``, ``costs`` and
``layer_kinds``: plain data, no program): each boundary 0..L with its verdict, rule codes and
crossing set (with the model source line of each value), each layer's kind label
(:mod:`graphcheck.analysis.kinds`) and cost, and the best balanced legal plan
(and the best plan that ignores legality) for each stage count the page offers.

``cut_map.js`` (vanilla JavaScript, no build step, no network) exports
``render({model, el})`` as anywidget expects; :func:`page` inlines it, its CSS and
the document into one self-contained HTML file that calls the same ``render`` on a
tiny model shim. The script re-judges an edited plan from the document alone: a plan
is legal when each of its cuts is a boundary the map proves legal.

>>> _inline({"x": "</script>"})
'{"x":"\\\\u003c/script\\\\u003e"}'
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from importlib import resources

from graphcheck._version import __version__
from graphcheck.planning.balance import Balance, balance
from graphcheck.planning.cost import DOC_LENGTH
from graphcheck.results.values import ResultKind

__all__ = ["MAX_OFFERED", "CutView", "document", "page", "script", "style"]

MAX_OFFERED = 8  # stage counts the page offers plans for: 1..8 (and the one asked for)
UNITS = {"flops": "FLOPs per token", "params": "parameter bytes"}


@dataclass
class CutView:
    """A view document and the exit status of the run that made it (what the ``html``
    format renders)."""

    document: dict
    exit_code: int = 0
    kind: ResultKind = ResultKind.VIEW


def script() -> str:
    """The view's JavaScript (an ES module exporting ``render``)."""
    return resources.files(__package__).joinpath("cut_map.js").read_text(encoding="utf-8")


def style() -> str:
    """The view's CSS."""
    return resources.files(__package__).joinpath("cut_map.css").read_text(encoding="utf-8")


def document(
    explorer,
    stages: int = 4,
    *,
    virtual: int = 1,
    metric: str = "flops",
    doc_length: int = DOC_LENGTH,
) -> dict:
    """The view's data for ``explorer``'s model; the plan first shown has
    ``stages·virtual`` stages (fewer when the model is too shallow)."""
    cut_map = explorer.map(doc_length)
    costs = explorer.costs(doc_length)
    first, layers, last = costs.values(metric)
    whole = sorted({d.code for d in cut_map.errors if d.cut is None})
    legal = set(cut_map.legal_cuts())
    num_layers = cut_map.num_layers
    shown = max(1, min(stages * virtual, num_layers + 2))
    offered = sorted({*range(1, min(MAX_OFFERED, num_layers + 2) + 1), shown})

    def plans(allowed) -> dict[str, dict | None]:
        return {str(s): _plan(balance(layers, s, allowed, first, last)) for s in offered}

    return {
        "graphcheck": __version__,
        "model": cut_map.model,
        "program_mode": str(cut_map.program_mode),
        "num_layers": num_layers,
        "metric": metric,
        "unit": UNITS[metric],
        "doc_length": costs.doc_length,
        "whole_program": whole,
        "boundaries": [_boundary(c, legal, costs) for c in cut_map.cuts],
        "layers": _layers(explorer.layer_kinds(), costs, layers),
        "first": first,
        "last": last,
        "stages": shown,
        "virtual": virtual,
        "plans": plans(legal),
        "blind": plans(None),
    }


def _layers(kinds, costs, values: list[float]) -> list[dict]:
    """Each layer: its index, the cost planned on, its kind label, bytes and FLOPs."""
    return [
        {
            "index": i,
            "cost": values[i],
            **kind.as_dict(),
            "params": costs.layers[i].param_bytes,
            "flops": costs.layers[i].flops_per_token,
        }
        for i, kind in enumerate(kinds)
    ]


def _plan(found: Balance | None) -> dict | None:
    return None if found is None else found.as_dict()


def _boundary(cut, legal: set[int], costs) -> dict:
    per_token = costs.boundary_bytes_per_token
    return {
        "position": cut.position,
        "legal": cut.position in legal,
        "codes": sorted(set(cut.codes)),
        "bytes_per_token": per_token[cut.position] if cut.position < len(per_token) else None,
        "crossing": [c.as_dict() | {"source": c.source} for c in cut.crossing],
    }


def _inline(data: dict) -> str:
    """``data`` as JSON safe inside a ``<script>`` element: ``<``, ``>`` and ``&`` only
    occur in JSON strings, where their ``\\u`` escapes read the same."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(data: dict) -> str:
    """One self-contained HTML page showing ``data`` (no network: script and style
    inlined)."""
    title = html.escape(f"graphcheck cut map · {data['model']}")
    module = script().replace("</script", "<\\/script")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
{style()}
</style>
</head>
<body>
<div id="graphcheck-view"></div>
<script type="application/json" id="graphcheck-data">{_inline(data)}</script>
<script type="module">
{module}
const data = JSON.parse(document.getElementById("graphcheck-data").textContent);
const listeners = [];
const model = {{
  get: (key) => (key === "data" ? data : undefined),
  on: (event, callback) => listeners.push([event, callback]),
}};
render({{ model, el: document.getElementById("graphcheck-view") }});
</script>
</body>
</html>
"""
