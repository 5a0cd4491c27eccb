"""Canonical fingerprints of a program's parts, for comparing programs.

A *part* is the subgraph of one region (a decoder layer, the input modules,
the output modules) as a labelled ``networkx.DiGraph``:

* each op is a node labelled with its target, its non-tensor arguments (window
  sizes, scales, eps, ``is_causal``), and its result's dtype and symbolic shape
  (symbols by name: ``T``, ``N+1``);
* each value the part reads from outside is a node too: a parameter or buffer by
  its FQN relative to the layer that owns it (``self_attn.q_proj.weight``; another
  layer's by global index, ``layer 3/rope.inv_freq``; a model-level one by its FQN
  in the uncut model's namespace, so a stage module that wraps the model compares
  equal), the incoming activation by dtype and shape, and every
  side input (mask, rotary table, varlen metadata) by its *provenance*: a hash
  of how the prelude computed it from the inputs, so a sliding-window layer
  and a full layer that differ only in the mask they read are told apart;
* a non-persistent buffer, and a constant tensor the program holds (a tensor
  attribute, a tensor the forward makes from Python numbers), is labelled by its
  *value* too: a hash of its dtype, shape and bytes, from the real values the fake
  build computed (:mod:`graphcheck.model.values`). A lifted constant is named without
  export's counter (``lifted_tensor``), which numbers them across the program. A
  persistent buffer is compared by FQN only, as a parameter: a rank loads it from the
  checkpoint, so the value it was built with is not the value it runs with. The
  values a part reads (its own, and those the side inputs it reads were computed from)
  are in :attr:`Part.values`;
* edges carry the argument positions.

Parts hold :class:`NodeRecord` values, not FX nodes: plain data that pickles, so a
stage exported in a fresh process (:mod:`graphcheck.stages.fresh`) sends its parts back.

>>> canonical([1.0, None, (2, "a")])
'[1.0, None, [2, a]]'
"""

from __future__ import annotations

import hashlib
import inspect
import operator
import re
import secrets
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import networkx as nx
import torch
import torch.fx
from torch.export.graph_signature import InputKind
from torch.utils._pytree import TreeSpec, tree_flatten

from graphcheck.analysis.fx import is_view_node, op_name
from graphcheck.analysis.program import Program
from graphcheck.analysis.regions import GLUE, Region, RegionKind
from graphcheck.diagnostics import normalize_fqn
from graphcheck.model.values import TensorValue, tensor_value
from graphcheck.results.values import Role

__all__ = [
    "NodeRecord",
    "Part",
    "Provenance",
    "attribute",
    "attribute_text",
    "by_value",
    "canonical",
    "canonical_symbols",
    "external_label",
    "glue_labels",
    "is_identity_view",
    "is_size",
    "op_label",
    "part_of",
    "record",
    "sorted_sums",
    "subgraph_lines",
    "subgraph_text",
    "tensor_text",
    "value_label",
    "within",
]


def canonical(value, readable=str) -> str:
    """A stable text form of a non-tensor argument: an FX node is ``%`` (its name is
    numbered per program), a tensor its dtype and shape, a function its qualified name
    (never its address), a dict its keys and values.

    >>> canonical({"BACKEND": "AUTO", "n": (1, None)})
    '{BACKEND: AUTO, n: [1, None]}'
    """
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(canonical(v, readable) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"{k}: {canonical(v, readable)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, torch.fx.Node):
        return "%"
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return readable(value)
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, torch.Tensor):
        return tensor_text(value, readable)
    if inspect.isfunction(value) or inspect.ismethod(value) or inspect.isbuiltin(value):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"  # not its address
    return str(value)


def tensor_text(value: torch.Tensor, readable=str) -> str:
    """A tensor (a fake one: a node's recorded value) by its dtype and shape."""
    dtype = str(value.dtype).removeprefix("torch.")
    return f"{dtype}[{', '.join(readable(d) for d in value.shape)}]"


def op_label(program: Program, node: torch.fx.Node) -> str:
    args = canonical(list(node.args), program.readable)[1:-1]
    kwargs = ", ".join(f"{k}={canonical(v, program.readable)}" for k, v in node.kwargs.items())
    sig = ", ".join(p for p in (args, kwargs) if p)
    return f"{op_name(node.target)}({sig}) -> {value_label(program, node)}"


def value_label(program: Program, node: torch.fx.Node) -> str:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return f"{program.dtype(node)}{program.shape(node)}"
    if isinstance(val, (list, tuple)):
        return "(" + ", ".join(type(v).__name__ for v in val) + ")"
    return canonical(val, program.readable)


_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


class Provenance:
    """How a side input was computed: a hash over its ancestry, by labels only.

    ``rename`` maps a model-level FQN of this program to the uncut model's namespace
    (a stage module that wraps the model holds ``inner.model.inv_freq``)."""

    def __init__(self, program: Program, rename: Callable[[str], str] | None = None) -> None:
        self.program = program
        self.rename = rename or (lambda fqn: fqn)
        self.memo: dict[torch.fx.Node, str] = {}
        self.read: dict[torch.fx.Node, dict[str, TensorValue]] = {}
        self._values: dict[torch.fx.Node, TensorValue | None] = {}
        self._binders: dict[str, tuple[torch.fx.Node, str]] | None = None
        specs = program.exported.program.graph_signature.input_specs
        self._specs = {spec.arg.name: spec for spec in specs}

    def fqn(self, fqn: str, layer: int | None = None) -> str:
        """``fqn`` as compared across programs: relative to its layer when ``layer`` owns
        it, by global layer index when another layer does, else renamed."""
        layout = self.program.layout
        owner = layout.layer_of(fqn)
        if owner is None:
            return self.rename(fqn)
        key = fqn[len(layout.layer_prefix) + 1 :].split(".", 1)
        rest = key[1] if len(key) > 1 else ""
        return rest if owner == layer else f"layer {owner}/{rest}"

    def value(self, node: torch.fx.Node) -> TensorValue | None:
        """The value of ``node`` if it is compared by value (a non-persistent buffer, a
        constant tensor; see the module docstring), else ``None``."""
        if node not in self._values:
            self._values[node] = by_value(self.program, self._specs.get(node.name), node)
        return self._values[node]

    def key(self, node: torch.fx.Node, layer: int | None = None) -> str:
        """How a value compared by value is named: ``buffer self_attn.rotary.inv_freq``,
        ``constant lifted_tensor`` (export's counter left out)."""
        spec = self._specs[node.name]
        kind = "constant" if spec.kind == InputKind.CONSTANT_TENSOR else "buffer"
        return f"{kind} {_LIFTED.sub('lifted_tensor', self.fqn(spec.target, layer))}"

    def reads(self, node: torch.fx.Node) -> dict[str, TensorValue]:
        """The values compared by value that ``node`` was computed from, by :meth:`key`."""
        if node not in self.read:
            value = self.value(node) if node.op == "placeholder" else None
            found = {self.key(node): value} if value is not None else {}
            for parent in node.all_input_nodes:
                found |= self.reads(parent)
            self.read[node] = found
        return self.read[node]

    def __call__(self, node: torch.fx.Node) -> str:
        if node not in self.memo:
            self.memo[node] = self._compute(node)
        return self.memo[node]

    def _compute(self, node: torch.fx.Node) -> str:
        program = self.program
        if isinstance(node.meta.get("val"), _SYMBOLIC):
            text = f"size:{value_label(program, node)}"  # sizes compare by expression
        elif node.op == "get_attr":
            text = f"get_attr:{_attribute_text(program, node)}"
        elif node.op == "placeholder":
            owned = program.owner.get(node)
            source = self.fqn(owned) if owned else self._input_name(node)
            text = f"{program.region[node].kind}:{source}:{value_label(program, node)}"
            value = self.value(node)
            text += f"#{value.short()}" if value is not None else ""
        else:
            parents = [self(a) for a in node.all_input_nodes]
            text = op_label(program, node) + "|" + ",".join(parents)
        return hashlib.sha1(self._symbols(node, text).encode()).hexdigest()[:16]

    def _symbols(self, node: torch.fx.Node, text: str) -> str:
        """``text`` with each unbacked size named by where it is bound: the provenance of
        the node whose result binds it and the place in that result (export numbers
        them per program: ``u4`` in the uncut program is ``u0`` in a stage's)."""
        if self._binders is None:
            self._binders = {
                str(symbol): (n, _path_text(path))
                for n in self.program.graph.nodes
                for symbol, path in (n.meta.get("unbacked_bindings") or {}).items()
            }

        def one(match: re.Match) -> str:
            binder, path = self._binders.get(match.group(0), (None, None))
            if binder is None:
                return match.group(0)  # not bound by a node: compared by its name
            return f"<{'self' if binder is node else self(binder)}{path}>"

        return _SYMBOL.sub(one, text) if self._binders else text

    def _input_name(self, node: torch.fx.Node) -> str:
        names = {n: k for k, n in self.program.user_inputs.items()}
        return names.get(node, node.name)


_LIFTED = re.compile(r"lifted_tensor_\d+$")  # export numbers the constants it lifts


def attribute(module, target: str):
    """What ``module``'s attribute ``target`` (dotted: ``sub.sdpa_mask0``) holds, else
    ``None``."""
    found = module
    for name in str(target).split("."):
        found = getattr(found, name, None)
    return found


def attribute_text(module, target: str, readable=str) -> str:
    """A ``get_attr`` of ``module`` by what it holds, never by the name export numbered
    it with: a subgraph (a higher-order op's body, FlexAttention's ``sdpa_mask0``) by
    its content (:func:`subgraph_text`), a tensor by its value (one whose value is not
    computed compares equal to nothing: fail closed), a pytree spec (a body's
    ``flat_apply`` argument layout, ``ModIndex0``) by its structure; anything else by its type
    and its name (export's counter of lifted constants left out), so it compares equal
    only under the same name."""
    held = attribute(module, target)
    if isinstance(held, torch.fx.GraphModule):
        return "{" + subgraph_text(held.graph, readable) + "}"
    if isinstance(held, torch.Tensor):
        value = tensor_value(held)
        if value.sha is None:  # not computed: it cannot be compared, so it never equals
            return f"tensor:unknown {value.dtype}{list(value.shape)} #{secrets.token_hex(8)}"
        return f"tensor:{value.sha}"
    if isinstance(held, TreeSpec):  # how a body's flat_apply rebuilds its arguments
        return f"treespec:{_ADDRESS.sub('', str(held))}"
    return f"{type(held).__name__}:{_LIFTED.sub('lifted_tensor', str(target))}"


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a function by its name, not where it lives


def _attribute_text(program: Program, node: torch.fx.Node) -> str:
    return attribute_text(program.exported.program.graph_module, node.target, program.readable)


def subgraph_lines(graph: torch.fx.Graph, readable=str) -> list[str]:
    """The content of a subgraph as canonical lines, one a node in program order: its
    op (the target of a call), its arguments (other nodes by position, ``%3``;
    constants and literals as written), its result's dtype and shape. A ``get_attr``
    is what it holds (:func:`attribute_text`): nested subgraphs by their content,
    recursively. Generated names are left out: node and placeholder names
    (``arg0_1``, ``mul_3``), subgraph names (``sdpa_mask0``, ``submod_2``), and the
    unbacked sizes a node of the subgraph binds (``u4``), named by the node and the
    place in its result that binds them (``%3.size(0)``)."""
    owner = graph.owning_module
    index = {n: i for i, n in enumerate(graph.nodes)}
    bound = {
        str(symbol): f"%{index[n]}{_path_text(path)}"
        for n in graph.nodes
        for symbol, path in (n.meta.get("unbacked_bindings") or {}).items()
    }

    def named(text) -> str:
        text = readable(text)
        return _SYMBOL.sub(lambda m: bound.get(m.group(0), m.group(0)), text) if bound else text

    def arg(value) -> str:
        if isinstance(value, torch.fx.Node):
            return f"%{index[value]}"
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(arg(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}: {arg(v)}" for k, v in value.items()) + "}"
        return canonical(value, named)

    lines = []
    for node in graph.nodes:
        if node.op == "get_attr":
            lines.append(f"get_attr({attribute_text(owner, node.target, named)})")
            continue
        target = op_name(node.target) if node.op.startswith("call_") else node.op
        args = [arg(a) for a in node.args] + [f"{k}={arg(v)}" for k, v in node.kwargs.items()]
        lines.append(f"{target}({', '.join(args)}) -> {canonical(node.meta.get('val'), named)}")
    return lines


def subgraph_text(graph: torch.fx.Graph, readable=str) -> str:
    """:func:`subgraph_lines` joined: two programs that number their subgraphs
    differently hold equal texts for equal bodies.

    >>> g = torch.fx.Graph(); x = g.placeholder("x_7"); _ = g.output(g.call_function(
    ...     torch.add, (x, 2)))
    >>> subgraph_text(g)
    'placeholder() -> None; add(%0, 2) -> None; output(%1) -> None'
    """
    return "; ".join(subgraph_lines(graph, readable))


def _path_text(path) -> str:
    """A pytree key path (where in a node's result an unbacked size is bound) as text."""
    return "".join(str(k) for k in path) if isinstance(path, (list, tuple)) else str(path)


def by_value(program: Program, spec, node: torch.fx.Node) -> TensorValue | None:
    """The :class:`TensorValue` of a placeholder compared by value: a non-persistent
    buffer or a constant tensor (``spec`` is its input spec); ``None`` for anything else,
    a persistent buffer too (a rank loads it from the checkpoint)."""
    if node.op != "placeholder" or spec is None or spec.target is None:
        return None
    buffer = spec.kind == InputKind.BUFFER and not spec.persistent
    if not buffer and spec.kind != InputKind.CONSTANT_TENSOR:
        return None
    exported = program.exported.program
    tensor = exported.constants.get(spec.target, exported.state_dict.get(spec.target))
    if not isinstance(tensor, torch.Tensor):
        val = node.meta.get("val")
        dtype = str(getattr(val, "dtype", "unknown")).removeprefix("torch.")
        shape = tuple(int(d) for d in getattr(val, "shape", ()))
        return TensorValue(dtype, shape, None, why="the exported program does not hold it")
    return tensor_value(tensor)


@dataclass(frozen=True)
class NodeRecord:
    """What a comparison reports about one node, as plain data.

    ``meta`` keeps the node's ``nn_module_stack`` and ``stack_trace``, so a
    diagnostic can be located at a record as at an FX node, and for a ``get_attr`` of
    a subgraph its :func:`subgraph_lines` (``subgraph``), so a report says where two
    bodies differ. None of it is compared: a record compares by its labels."""

    name: str
    op: str  # op name, ``torch_attn._varlen_attn.default``
    label: str  # :func:`op_label`, or the external label of a value read
    value: str  # :func:`value_label`
    args: tuple[tuple[str, str], ...]  # (argument name, canonical text)
    within: str | None  # module path inside its layer, with the class
    place: str  # :meth:`Program.label`
    meta: dict = field(default_factory=dict, compare=False)


def record(program: Program, node: torch.fx.Node, label: str | None = None) -> NodeRecord:
    """The :class:`NodeRecord` of ``node``."""
    schema = getattr(node.target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema else []
    args = tuple(
        (names[i] if i < len(names) else f"arg{i}", canonical(a, program.readable))
        for i, a in enumerate(node.args)
    ) + tuple((k, canonical(v, program.readable)) for k, v in sorted(node.kwargs.items()))
    stack = node.meta.get("nn_module_stack") or {}
    meta = {
        "nn_module_stack": {k: (str(p), _class_name(c)) for k, (p, c) in stack.items()},
        "stack_trace": node.meta.get("stack_trace"),
    }
    if node.op == "get_attr":  # a subgraph's body, to say where two bodies differ
        held = attribute(program.exported.program.graph_module, node.target)
        if isinstance(held, torch.fx.GraphModule):
            meta["subgraph"] = subgraph_lines(held.graph, program.readable)
    call = node.op == "call_function"
    return NodeRecord(
        node.name,
        op_name(node.target) if call else node.op,
        label if label is not None else op_label(program, node) if call else node.name,
        value_label(program, node),
        args if call else (),
        within(program, node),
        program.label(node),
        meta,
    )


def _class_name(cls) -> str:
    return cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"


def within(program: Program, node: torch.fx.Node) -> str | None:
    """Module path of ``node`` inside its layer, with the module's class
    (``self_attn.q_proj (Linear)``)."""
    stack = list((node.meta.get("nn_module_stack") or {}).values())
    path, cls = stack[-1] if stack else ("", "")
    path = normalize_fqn(path) or ""
    region = program.region.get(node)
    keys = {g: k for k, g in program.layout.layer_keys.items()}
    if region is not None and region.kind == RegionKind.LAYER:
        path = path.removeprefix(f"{program.layout.layer_prefix}.{keys.get(region.layer)}.")
    name = _class_name(cls).rsplit(".", 1)[-1] if cls else ""
    return f"{path} ({name})" if name else path


@dataclass
class Part:
    """One region of a program as a labelled graph, its ops and the values it reads."""

    region: Region
    graph: nx.DiGraph
    ops: list[NodeRecord] = field(default_factory=list)
    externals: dict[str, NodeRecord] = field(default_factory=dict)
    values: dict[str, TensorValue] = field(default_factory=dict)  # read, by Provenance.key
    value_nodes: dict[str, str] = field(default_factory=dict)  # key -> its external's key

    @property
    def hash(self) -> str:
        with warnings.catch_warnings():  # networkx notes a change of its directed hashes
            warnings.simplefilter("ignore")
            return nx.weisfeiler_lehman_graph_hash(self.graph, node_attr="label", edge_attr="pos")

    def labels(self) -> list[str]:
        return [n.label for n in self.ops]


def part_of(program: Program, region: Region, provenance: Provenance) -> Part:
    """The part of ``program`` in ``region``; parameters and buffers named relative to
    the layer (:meth:`Provenance.fqn`).

    Sizes (SymInt arithmetic) are not ops of a part: they are recomputable metadata,
    read as ``size:<expr>`` wherever they were computed. Views that change nothing
    (a full slice, a view to the same shape) are looked through."""
    part = Part(region, nx.DiGraph())
    for node in program.graph.nodes:
        if node.op != "call_function" or program.region.get(node) != region:
            continue
        if is_size(node) or is_identity_view(node):
            continue
        part.ops.append(record(program, node))
        part.graph.add_node(node.name, label=part.ops[-1].label)
        flat, _ = tree_flatten((node.args, node.kwargs))
        for pos, arg in enumerate(flat):
            if isinstance(arg, torch.fx.Node):
                _add_edge(program, part, _through(arg), node, pos, provenance)
    return canonical_symbols(part)


# symbols torch names by kind and counter: backed sizes ``s3``, unbacked ints ``u4``,
# unbacked floats; the input symbols are named already (``T``, ``N``) by Program.readable
_SYMBOL = re.compile(r"(?<![\w.])(?:s|u|zuf|zf)\d+(?![\w.])")


# a runtime assertion names the FX node it checks (``on node 'ge_4'``), numbered per program
_ASSERT_NODE = re.compile(r" on node '[^']*'")


# a run of terms added together (``sym2 + sym3 + 2*sym0``): not after a minus, a product
# or a power (whose operand only the first term would be), nor before one
_TERM = r"[\w.]+(?:\*\*?[\w.]+)*"
_SUM = re.compile(rf"(?<![-*/\w.])(?<!- ){_TERM}(?: \+ {_TERM})+(?![\w.(*/])")


def sorted_sums(text: str) -> str:
    """``text`` with the terms of every sum in sorted order: the order sympy prints a
    sum's terms in follows the symbols' names, which differ per program (``u10 + u11 +
    u8 + u9`` renamed is ``sym2 + sym3 + sym0 + sym1``, the ``sym0 + sym1 + sym2 + sym3``
    of another program). A term that is subtracted, multiplied or raised keeps its place.

    >>> sorted_sums("Eq(sym2 + sym3 + sym0 + sym1, 2*sym4)"), sorted_sums("a - c + b")
    ('Eq(sym0 + sym1 + sym2 + sym3, 2*sym4)', 'a - c + b')
    """
    return _SUM.sub(lambda m: " + ".join(sorted(m.group(0).split(" + "))), text)


def canonical_symbols(part: Part) -> Part:
    """``part`` with the symbols other than the named input ones renamed ``sym0``,
    ``sym1``, ... by their first occurrence in its labels, in program order (and the
    node names runtime assertions quote left out).

    Export numbers unbacked sizes per program (``u4`` in the uncut program is ``u0``
    in a stage's); the renaming is one bijection over the whole part, so structure is
    kept: ``u0`` against ``2*u0``, or one symbol twice against two symbols, still
    differ.

    >>> g = nx.DiGraph(); g.add_node("a", label="f() -> int64[u4, 2*u4]")
    >>> g.add_node("b", label="g() -> int64[u5]")
    >>> [d["label"] for _, d in canonical_symbols(Part(GLUE, g)).graph.nodes(data=True)]
    ['f() -> int64[sym0, 2*sym0]', 'g() -> int64[sym1]']
    """
    names: dict[str, str] = {}

    def rename(text: str) -> str:
        def one(match: re.Match) -> str:
            return names.setdefault(match.group(0), f"sym{len(names)}")

        return sorted_sums(_SYMBOL.sub(one, _ASSERT_NODE.sub("", text)))

    for _, data in part.graph.nodes(data=True):
        data["label"] = rename(data["label"])

    def fix(rec: NodeRecord) -> NodeRecord:
        args = tuple((k, rename(v)) for k, v in rec.args)
        return replace(rec, label=rename(rec.label), value=rename(rec.value), args=args)

    part.ops = [fix(r) for r in part.ops]
    part.externals = {k: fix(r) for k, r in part.externals.items()}
    return part


def _add_edge(program, part: Part, arg, node, pos: int, provenance) -> None:
    internal = program.region.get(arg) == part.region and not is_size(arg)
    source = arg.name if internal else _external(program, part, arg, provenance)
    old = (
        part.graph.edges[source, node.name]["pos"] if part.graph.has_edge(source, node.name) else ""
    )
    part.graph.add_edge(source, node.name, pos=f"{old}{pos},")


def is_size(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get("val"), _SYMBOLIC)


def is_identity_view(node: torch.fx.Node) -> bool:
    """A view whose result is its input, same shape and dtype (``x[:, 0:]``)."""
    if not is_view_node(node) or node.target is operator.getitem:
        return False
    src = node.args[0] if node.args else None
    a, b = node.meta.get("val"), getattr(src, "meta", {}).get("val")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    return (
        a.dtype == b.dtype and str(a.shape) == str(b.shape) and str(a.stride()) == str(b.stride())
    )


def glue_labels(program: Program, nodes) -> Counter:
    """Labels of the model-level ops among ``nodes`` that carry state (activations,
    weight-derived values), sizes and identity views left out."""
    return Counter(
        op_label(program, n)
        for n in nodes
        if program.region.get(n) == GLUE
        and n in program.interval
        and n.op == "call_function"
        and not is_size(n)
        and not is_identity_view(n)
    )


def _through(node: torch.fx.Node) -> torch.fx.Node:
    while node.op == "call_function" and is_identity_view(node):
        node = node.args[0]
    return node


def _external(program, part: Part, node, provenance: Provenance) -> str:
    key = f"ext:{node.name}"
    if key not in part.graph:
        label = external_label(program, node, provenance, part.region.layer)
        part.externals[key] = record(program, node, label)
        part.graph.add_node(key, label=label)
        _add_values(part, key, node, provenance, label.startswith("side:"))
    return key


def _add_values(part: Part, key: str, node, provenance: Provenance, side: bool) -> None:
    """The values compared by value that ``node``, read by ``part``, is or was computed
    from; a second value under one name is numbered (``constant lifted_tensor (2)``)."""
    value = provenance.value(node)
    if value is not None:
        found = {provenance.key(node, part.region.layer): value}
    else:
        found = provenance.reads(node) if side else {}
    for name, value in found.items():
        n, unique = 1, name
        while unique in part.values and part.values[unique] != value:
            n += 1
            unique = f"{name} ({n})"
        part.values[unique] = value
        part.value_nodes.setdefault(unique, key)


def external_label(program: Program, node, provenance: Provenance, layer: int | None) -> str:
    """The label of a value ``node`` read by a part of ``layer`` (``None``: not a layer)."""
    region = program.region.get(node)
    fqn = program.owner.get(node)
    if region is not None and region.kind in (RegionKind.PARAMETER, RegionKind.BUFFER) and fqn:
        value = provenance.value(node)
        if value is not None:  # the name without export's counter, and the value
            kind, name = provenance.key(node, layer).split(" ", 1)
            return f"{kind}:{name}:{value_label(program, node)}#{value.short()}"
        kind = "param" if region.kind == RegionKind.PARAMETER else "buffer"
        return f"{kind}:{provenance.fqn(fqn, layer)}:{value_label(program, node)}"
    if program.role.get(node) == Role.ACTIVATION:
        return f"activation:{value_label(program, node)}"
    if is_size(node):  # a size by its expression, which canonical_symbols renames
        return f"side:size:{value_label(program, node)}"
    return f"side:{provenance(node)}"
