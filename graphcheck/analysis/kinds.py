"""A short kind label per decoder layer, read from the exported graph's ops.

The label joins what the layer's ops say about its token mixer and its MLP:

* attention: a varlen attention op gives ``full attention`` or ``window N`` (the
  layer attends to the N latest keys, itself included) from its own window
  argument; SDPA and flex attention are named by their op (their mask decides what
  they attend to); ``graphcheck::chunk_gated_delta_rule`` is ``linear attention``;
* MLP: a router's ``topk`` or a ``_grouped_mm`` over routed rows is ``MoE``, any
  other matmul ``dense``.

Layers that share a label but run other ops than most layers with that label (the
reference decoder's layer 0 normalises with a LayerNorm) are marked ``special``,
with the ops that differ. Module names are never read.

>>> attention_label("torch_attn._varlen_attn.default", {"window_size": [16, 0]})
'window 17'
>>> attention_label("graphcheck.varlen_attention.default", {"window_left": -1})
'full attention'
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality import bind
from graphcheck.analysis.opfacts import Work, attention_window, work_of
from graphcheck.analysis.program import Program
from graphcheck.analysis.regions import RegionKind

__all__ = ["LayerKind", "attention_label", "layer_kinds"]


@dataclass(frozen=True)
class LayerKind:
    """A layer's label and, for a ``special`` layer, how its ops differ (``+op``: ops it
    runs more often than its peers, ``-op``: less often)."""

    label: str
    differs: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"label": self.label, "differs": list(self.differs)}


def attention_label(name: str, bound: dict) -> str:
    """The label of one attention op ``name`` with bound arguments ``bound``."""
    if Work.VARLEN_ATTENTION not in work_of(name):
        return "flex attention" if name.endswith("flex_attention") else "SDPA attention"
    left, _ = attention_window(name, bound)
    return "full attention" if left < 0 else f"window {left + 1}"


def _mixer(node: torch.fx.Node, name: str) -> str | None:
    work = work_of(name)
    if Work.VARLEN_ATTENTION in work:
        return attention_label(name, bind(node))
    if Work.SDPA_ATTENTION in work or name.endswith("flex_attention"):
        return attention_label(name, {})
    return "linear attention" if Work.LINEAR_ATTENTION in work else None


def _label(ops: list[tuple[torch.fx.Node, str]]) -> str:
    mixers = list(dict.fromkeys(m for node, name in ops if (m := _mixer(node, name))))
    work = set().union(*(work_of(name) for _, name in ops))
    mlp = "MoE" if Work.ROUTED in work else "dense" if Work.MATMUL in work else None
    return " · ".join(p for p in (" + ".join(mixers), mlp) if p) or "no ops"


def _differs(own: Counter, usual: Counter) -> tuple[str, ...]:
    more, less = own - usual, usual - own
    short = [n.removeprefix("aten.").removesuffix(".default") for n in (*more, *less)]
    return tuple(f"{'+' if i < len(more) else '-'}{n}" for i, n in enumerate(short))


def layer_kinds(program: Program) -> list[LayerKind]:
    """Each layer's :class:`LayerKind`, from the ops of its region in ``program``."""
    ops: dict[int, list[tuple[torch.fx.Node, str]]] = {i: [] for i in range(program.num_layers)}
    for node in program.graph.nodes:
        region = program.region.get(node)
        if node.op == "call_function" and region is not None and region.kind == RegionKind.LAYER:
            ops.setdefault(region.layer, []).append((node, op_name(node.target)))
    labels = {i: _label(found) for i, found in ops.items()}
    counts = {i: Counter(name for _, name in found) for i, found in ops.items()}
    kinds = []
    for i in range(program.num_layers):
        peers = [counts[j] for j in labels if labels[j] == labels[i]]
        usual, seen = Counter(tuple(sorted(c.items())) for c in peers).most_common(1)[0]
        special = len(peers) > 2 and counts[i] != Counter(dict(usual)) and seen > 1
        label = labels[i] + (" · special" if special else "")
        kinds.append(LayerKind(label, _differs(counts[i], Counter(dict(usual))) if special else ()))
    return kinds
